// SPDX-License-Identifier: GPL-2.0
//! The TAP's steering program (`TUNSETSTEERINGEBPF`): which of the TAP's
//! queues each frame the stack transmits goes to. Queue 0 is the daemon's
//! and is never chosen; the driver's are 1..=n (docs/protocol.md, "Sending"
//! and "Several queues").
//!
//! With several queues a frame's queue is a hash of its flow, computed from
//! its headers: the IP addresses and, for TCP and UDP, the ports, so that a
//! flow keeps its queue. The stack's own `skb->hash` is not used: only
//! frames of the machine's own sockets are sure to carry one, and frames it
//! forwards (us0 in a bridge, or routed) may not. A frame that is neither
//! IPv4 nor IPv6, or too short to hold what is read, goes to queue 1.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// `struct bpf_insn`: opcode, registers (dst low nibble, src high), offset, immediate.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

// The opcodes used (include/uapi/linux/bpf.h, bpf_common.h).
const LD_ABS_B: u8 = 0x30; // r0 = packet byte at imm (big-endian loads, as ntohs/ntohl)
const LD_ABS_H: u8 = 0x28;
const LD_ABS_W: u8 = 0x20;
const LDX_W: u8 = 0x61; // dst = *(u32 *)(src + off)
const MOV_K: u8 = 0xb7;
const MOV_X: u8 = 0xbf;
const XOR_X: u8 = 0xaf;
const MUL32_K: u8 = 0x24; // 32-bit multiply: the product's high half is dropped
const MUL_K: u8 = 0x27;
const RSH_K: u8 = 0x77;
const ADD_K: u8 = 0x07;
const JA: u8 = 0x05;
const JEQ_K: u8 = 0x15;
const JLT_K: u8 = 0xa5;
const EXIT: u8 = 0x95;

const R0: u8 = 0;
const R1: u8 = 1;
const R6: u8 = 6; // the context, where LD_ABS wants it
const R7: u8 = 7; // the flow's hash as it is gathered

/// `struct __sk_buff`'s `len`: the frame's length.
const SKB_LEN: i16 = 0;
/// Fibonacci hashing's multiplier (2^32 / the golden ratio). The product's
/// top bits depend on every bit of the flow's words, and the queue is taken
/// from them (`hash * n >> 32`, the kernel's reciprocal_scale): ports that
/// differ only in their high bits (Linux hands out even ephemeral ports, in
/// steps of two) still land on different queues, which `hash % n` of the
/// folded words would not do.
const GOLDEN: u32 = 0x9e37_79b1;

/// A jump's target, resolved when the program is finished.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Ipv4,
    Ipv4Ports,
    Ipv6,
    Ipv6Ports,
    Mix,
    FirstQueue,
}

/// A small assembler: instructions in order, jumps by label.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    jumps: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) -> &mut Self {
        self.insns.push(Insn { code, regs: src << 4 | dst, off, imm });
        self
    }

    fn label(&mut self, label: Label) -> &mut Self {
        self.labels.push((label, self.insns.len()));
        self
    }

    fn jump(&mut self, code: u8, imm: i32, to: Label) -> &mut Self {
        self.jumps.push((self.insns.len(), to));
        self.op(code, R0, 0, 0, imm)
    }

    /// r7 ^= the packet's big-endian word at `offset`.
    fn fold_word(&mut self, offset: i32) -> &mut Self {
        self.op(LD_ABS_W, R0, 0, 0, offset).op(XOR_X, R7, R0, 0, 0)
    }

    /// r7 ^= the ports (the word at `ports`) if the byte at `protocol`
    /// names TCP or UDP; then on to `Mix`, or on below, at `here`.
    fn fold_ports(&mut self, protocol: i32, ports: i32, here: Label) -> &mut Self {
        self.op(LD_ABS_B, R0, 0, 0, protocol)
            .jump(JEQ_K, 6, here)
            .jump(JEQ_K, 17, here)
            .jump(JA, 0, Label::Mix)
            .label(here)
            .fold_word(ports)
    }

    fn finish(mut self) -> Vec<Insn> {
        for &(at, to) in &self.jumps {
            let target = self.labels.iter().find(|(l, _)| *l == to).expect("every label is placed").1;
            self.insns[at].off = (target - at - 1) as i16;
        }
        self.insns
    }
}

/// The program for `queues` driver queues: 1 + the flow's hash scaled to `queues`.
pub fn program(queues: u16) -> Vec<Insn> {
    const ETH_HLEN: i32 = 14;
    let mut a = Asm::default();
    a.op(MOV_X, R6, R1, 0, 0)
        .op(LDX_W, R0, R1, SKB_LEN, 0)
        .jump(JLT_K, ETH_HLEN + 24, Label::FirstQueue) // an IPv4 header and ports
        .op(MOV_K, R7, 0, 0, 0)
        .op(LD_ABS_H, R0, 0, 0, 12) // the ethertype
        .jump(JEQ_K, 0x0800, Label::Ipv4)
        .jump(JEQ_K, 0x86dd, Label::Ipv6)
        .jump(JA, 0, Label::FirstQueue);
    // IPv4: addresses at 12 and 16, protocol at 9, ports after a 20-byte
    // header (one with options hashes other bytes, the same for the flow).
    a.label(Label::Ipv4)
        .fold_word(ETH_HLEN + 12)
        .fold_word(ETH_HLEN + 16)
        .fold_ports(ETH_HLEN + 9, ETH_HLEN + 20, Label::Ipv4Ports)
        .jump(JA, 0, Label::Mix);
    // IPv6: the addresses' last words, the next header at 6, ports after
    // the 40-byte header (extension headers hash other bytes).
    a.label(Label::Ipv6)
        .op(LDX_W, R0, R6, SKB_LEN, 0)
        .jump(JLT_K, ETH_HLEN + 44, Label::FirstQueue)
        .fold_word(ETH_HLEN + 20)
        .fold_word(ETH_HLEN + 36)
        .fold_ports(ETH_HLEN + 6, ETH_HLEN + 40, Label::Ipv6Ports);
    a.label(Label::Mix)
        .op(MOV_X, R0, R7, 0, 0)
        .op(MUL32_K, R0, 0, 0, GOLDEN as i32)
        .op(MUL_K, R0, 0, 0, queues.into())
        .op(RSH_K, R0, 0, 0, 32)
        .op(ADD_K, R0, 0, 0, 1)
        .op(EXIT, 0, 0, 0, 0)
        .label(Label::FirstQueue)
        .op(MOV_K, R0, 0, 0, 1)
        .op(EXIT, 0, 0, 0, 0);
    a.finish()
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// The part of `union bpf_attr` BPF_PROG_LOAD reads, zero-padded as the kernel wants.
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    rest: [u64; 12],
}

/// Loads the program for `queues` driver queues; the fd is the program.
pub fn load(queues: u16) -> io::Result<OwnedFd> {
    let insns = program(queues);
    let license = b"GPL\0";
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: BPF_PROG_LOAD reads `attr` and the memory it points to; the result is a new fd we own.
    let prog = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, &attr as *const ProgLoad, std::mem::size_of::<ProgLoad>()) };
    if prog < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("loading the TAP's steering program (bpf): {e}")));
    }
    // SAFETY: `prog` was just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(prog as RawFd) })
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// `union bpf_attr`'s BPF_PROG_TEST_RUN part.
    #[repr(C)]
    #[derive(Default)]
    struct TestRun {
        prog_fd: u32,
        retval: u32,
        data_size_in: u32,
        data_size_out: u32,
        data_in: u64,
        data_out: u64,
        rest: [u64; 8],
    }

    /// The queue the kernel's run of the program answers for `frame`. A
    /// socket filter's test run strips an Ethernet header first (tun runs
    /// it on the whole frame): a dummy one goes before the frame.
    fn queue_of(prog: &OwnedFd, frame: &[u8]) -> u32 {
        let data = [&[0u8; 12][..], &[0x08, 0x00], frame].concat();
        let mut attr = TestRun { prog_fd: prog.as_raw_fd() as u32, data_size_in: data.len() as u32,
                                 data_in: data.as_ptr() as u64, ..Default::default() };
        // SAFETY: BPF_PROG_TEST_RUN reads `attr` and `data`, writes `attr.retval`.
        let r = unsafe { libc::syscall(libc::SYS_bpf, 10, &mut attr as *mut TestRun, std::mem::size_of::<TestRun>()) };
        assert_eq!(r, 0, "BPF_PROG_TEST_RUN: {}", io::Error::last_os_error());
        attr.retval
    }

    fn ipv4_tcp(src_port: u16, dst_port: u16) -> Vec<u8> {
        let mut f = vec![0u8; 66];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 2, 15]);
        f[30..34].copy_from_slice(&[10, 0, 2, 2]);
        f[34..36].copy_from_slice(&src_port.to_be_bytes());
        f[36..38].copy_from_slice(&dst_port.to_be_bytes());
        f
    }

    #[test]
    fn flows_spread_over_the_drivers_queues_and_keep_theirs() {
        let prog = load(2).expect("the daemon loads it as root");
        // Even ephemeral ports, as Linux hands them out to connect().
        let queues: Vec<u32> = (0..16).map(|i| queue_of(&prog, &ipv4_tcp(40000 + 2 * i, 5201))).collect();
        assert!(queues.iter().all(|q| (1..=2).contains(q)), "{queues:?}");
        assert!(queues.contains(&1) && queues.contains(&2), "16 flows, one queue: {queues:?}");
        assert_eq!(queue_of(&prog, &ipv4_tcp(40000, 5201)), queues[0], "a flow keeps its queue");
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(queue_of(&prog, &arp), 1);
        assert_eq!(queue_of(&prog, &ipv4_tcp(1, 2)[..30]), 1, "too short for its addresses");
        let four = load(4).unwrap();
        let mut per_queue = [0; 5];
        (0..64).for_each(|i| per_queue[queue_of(&four, &ipv4_tcp(32768 + 2 * i, 443)) as usize] += 1);
        assert!(per_queue[0] == 0 && per_queue[1..].iter().all(|&n| n >= 8), "64 flows on 4 queues: {per_queue:?}");
        let one = load(1).unwrap();
        assert!((0..8).all(|i| queue_of(&one, &ipv4_tcp(40000 + 2 * i, 5201)) == 1));
    }
}
