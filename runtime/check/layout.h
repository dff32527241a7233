/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What stubs.S needs of include/understudy/trace.h, as plain numbers the
 * assembler can read (trace.h has C in it); producer.c asserts each equal
 * to trace.h's.
 */
#ifndef UNDERSTUDY_CHECK_LAYOUT_H
#define UNDERSTUDY_CHECK_LAYOUT_H

#define STUB_HDR_HEAD			128	/* offsetof(struct us_trace_header, head) */
#define STUB_HDR_APPROVED		192
#define STUB_HDR_VERDICT_AT		200
#define STUB_HDR_CHECKER_WAITING	208
#define STUB_RING_ENTRIES		(1 << 20)	/* US_TRACE_RING_ENTRIES */
#define STUB_EVENT_SHIFT		5	/* sizeof(struct us_trace_event) == 32 */
#define STUB_EV_ACCESS			1	/* US_EV_ACCESS */
#define STUB_EV_PORT			3	/* US_EV_PORT */
#define STUB_EV_FRAME			4	/* US_EV_FRAME */
#define STUB_EV_RETURN			5	/* US_EV_RETURN */
#define STUB_EV_ESCAPE			6	/* US_EV_ESCAPE */
#define STUB_EVF_PERCPU			0x0001	/* US_EVF_PERCPU */

#endif /* UNDERSTUDY_CHECK_LAYOUT_H */
