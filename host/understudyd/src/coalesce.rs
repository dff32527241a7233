// SPDX-License-Identifier: GPL-2.0
//! Large receive offload in the daemon: consecutive TCP segments of one flow
//! that the driver received in one batch go to the TAP as one GSO frame.
//!
//! A TAP moves one frame per write(2), and a write is the daemon's largest
//! per-frame cost on receive; in-kernel, the driver's NAPI poll hands the
//! same segments to GRO, which merges them before the stack sees them. This
//! does what GRO does for the common case, with GRO's rules: IPv4 without
//! options or fragments, TCP with only ACK (and PSH, which ends a merge),
//! the next sequence number, the same acknowledgement, window and options,
//! segments of one size (a shorter one ends a merge), a valid checksum
//! (verified by the device, or here: QEMU's e1000 verifies none, and the
//! stack would otherwise do it for each segment). The merged frame carries its segment size and leaves the TCP
//! checksum to the stack's offload path (`NEEDS_CSUM`, as GRO's
//! CHECKSUM_PARTIAL), so a forwarded frame is cut up again correctly.
//! Anything else goes through unchanged, in order.
//!
//! Nothing but headers is copied: a merged frame is the first segment's
//! headers, fixed up, followed by every segment's payload where the driver
//! received it (the TAP gathers them in one writev), and any other frame is
//! written from where it lies.

/// What the TAP must be told about a frame (its virtio_net_hdr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxMeta {
    /// One received frame: did the device check its L4 checksum?
    Plain { csum_valid: bool },
    /// `segments` TCP/IPv4 segments merged, of `gso_size` payload bytes
    /// each (the last may be shorter); the TCP checksum field holds the
    /// pseudo-header sum, to be completed from `csum_start` (the TCP header)
    /// into `csum_start + 16`; the headers end at `hdr_len`.
    Tcp4 { segments: u32, gso_size: u16, csum_start: u16, hdr_len: u16 },
}

/// Bytes `start..start + len` of the received frame `from` (the caller's
/// handle for it: a pool buffer in the daemon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece<H> {
    pub from: H,
    pub start: usize,
    pub len: usize,
}

/// A frame ready for the TAP: `head`, which the coalescer owns, then the
/// `pieces`, which stay where the frames were received. Every frame pushed
/// is the source of exactly one piece of one emitted frame, so once that
/// frame is written its buffer can be reused.
#[derive(Debug)]
pub struct Frame<'a, H> {
    pub head: &'a [u8],
    pub pieces: &'a [Piece<H>],
}

const ETH_HLEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const IPPROTO_TCP: u8 = 6;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;
const IP_HLEN: usize = 20;
/// The longest headers a mergeable segment has: Ethernet, IPv4 without
/// options, TCP with 40 bytes of options.
const MAX_HLEN: usize = ETH_HLEN + IP_HLEN + 60;
/// An IPv4 packet's length is 16 bits.
const MAX_IP_LEN: usize = 65535;
/// Segments merged at most: a NAPI budget's worth, and far below the 1024
/// pieces one writev(2) takes.
pub const MAX_SEGMENTS: usize = 64;

/// The parts of a mergeable segment the rules look at, parsed from a private
/// copy of its headers: a driver that rewrites the frame meanwhile can change
/// the payload the TAP gets (as it could by forging the frame), never what
/// the daemon decided on.
struct Segment {
    /// Ethernet, IP and TCP header bytes.
    hlen: usize,
    /// Payload bytes, from `hlen` (an Ethernet pad after them is left out).
    payload: usize,
    seq: u32,
    psh: bool,
}

impl Segment {
    fn parse(headers: &[u8], frame_len: usize) -> Option<Segment> {
        let ip = headers.get(ETH_HLEN..ETH_HLEN + IP_HLEN)?;
        if u16::from_be_bytes([headers[12], headers[13]]) != ETHERTYPE_IPV4 {
            return None;
        }
        // Version 4, no options; not a fragment (DF may be set); TCP.
        let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        if ip[0] != 0x45 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 || ip[9] != IPPROTO_TCP
            || ETH_HLEN + total > frame_len || total < IP_HLEN + 20 {
            return None;
        }
        let tcp = headers.get(ETH_HLEN + IP_HLEN..ETH_HLEN + IP_HLEN + 20)?;
        let tcp_hlen = (tcp[12] >> 4) as usize * 4;
        let flags = tcp[13];
        let hlen = ETH_HLEN + IP_HLEN + tcp_hlen;
        if tcp_hlen < 20 || hlen > headers.len() || IP_HLEN + tcp_hlen >= total || flags & !TCP_PSH != TCP_ACK {
            return None;
        }
        Some(Segment {
            hlen,
            payload: ETH_HLEN + total - hlen,
            seq: u32::from_be_bytes(tcp[4..8].try_into().unwrap()),
            psh: flags & TCP_PSH != 0,
        })
    }

    /// The TCP checksum over the pseudo header, the TCP header and the
    /// payload checks out.
    fn checksum_ok(&self, headers: &[u8], payload: &[u8]) -> bool {
        let (ip, tcp) = (ETH_HLEN, ETH_HLEN + IP_HLEN);
        let tcp_len = (self.hlen - tcp + payload.len()) as u32;
        let pseudo = sum(&headers[ip + 12..ip + 20], (IPPROTO_TCP as u32 + tcp_len) as u64);
        // The TCP header's length is a multiple of 4, so the payload starts
        // on a 16-bit word of the segment, as `sum` needs.
        fold(sum(payload, sum(&headers[tcp..self.hlen], pseudo))) == 0xffff
    }
}

/// The merge under way: the first segment's headers, and every segment's
/// payload where it was received.
pub struct Coalescer<H> {
    head: Vec<u8>,
    pieces: Vec<Piece<H>>,
    /// The merged IP packet's length so far.
    ip_len: usize,
    gso_size: usize,
    next_seq: u32,
    /// A PSH or a short segment ended it: the next frame starts anew.
    closed: bool,
}

impl<H> Default for Coalescer<H> {
    fn default() -> Self {
        Coalescer { head: Vec::with_capacity(MAX_HLEN), pieces: Vec::with_capacity(MAX_SEGMENTS), ip_len: 0, gso_size: 0,
                    next_seq: 0, closed: false }
    }
}

impl<H: Copy> Coalescer<H> {
    /// Takes the next received frame, `frame` its bytes and `from` the
    /// caller's handle for them; `emit` gets every frame that is complete,
    /// in the order received. The bytes are read during this call only;
    /// the pieces name them by `from` until emitted.
    pub fn push<E>(&mut self, frame: &[u8], from: H, csum_valid: bool,
                   emit: &mut impl FnMut(Frame<H>, RxMeta) -> Result<(), E>) -> Result<(), E> {
        let mut copy = [0u8; MAX_HLEN];
        let headers = &mut copy[..frame.len().min(MAX_HLEN)];
        headers.copy_from_slice(&frame[..headers.len()]);
        let segment = Segment::parse(headers, frame.len()).filter(|s| {
            s.payload > 0 && (csum_valid || s.checksum_ok(headers, &frame[s.hlen..s.hlen + s.payload]))
        });
        let Some(segment) = segment else {
            self.flush(emit)?;
            let whole = [Piece { from, start: 0, len: frame.len() }];
            return emit(Frame { head: &[], pieces: &whole }, RxMeta::Plain { csum_valid });
        };
        if !self.pieces.is_empty() && !self.continues(headers, &segment) {
            self.flush(emit)?;
        }
        if self.pieces.is_empty() {
            self.head.clear();
            self.head.extend_from_slice(&headers[..segment.hlen]);
            self.ip_len = segment.hlen - ETH_HLEN;
            self.gso_size = segment.payload;
        } else if segment.psh {
            self.head[ETH_HLEN + IP_HLEN + 13] |= TCP_PSH;
        }
        self.pieces.push(Piece { from, start: segment.hlen, len: segment.payload });
        self.ip_len += segment.payload;
        self.next_seq = segment.seq.wrapping_add(segment.payload as u32);
        self.closed = segment.psh || segment.payload < self.gso_size;
        Ok(())
    }

    /// Whether the segment with `headers` is the next of the held flow, as
    /// GRO decides it.
    fn continues(&self, headers: &[u8], s: &Segment) -> bool {
        let held = &self.head[..];
        let ip = ETH_HLEN;
        let tcp = ip + IP_HLEN;
        let same = |a: usize, b: usize| held[a..b] == headers[a..b];
        !self.closed
            && self.pieces.len() < MAX_SEGMENTS
            && s.hlen == held.len()
            && s.seq == self.next_seq
            && s.payload <= self.gso_size
            && self.ip_len + s.payload <= MAX_IP_LEN
            && same(0, 14)                  // MACs and type
            && same(ip + 1, ip + 2)         // TOS
            && same(ip + 8, ip + 10)        // TTL, protocol
            && same(ip + 12, ip + 20)       // addresses
            && same(tcp, tcp + 4)           // ports
            && same(tcp + 8, tcp + 12)      // acknowledgement
            && same(tcp + 14, tcp + 16)     // window
            && same(tcp + 20, held.len())   // options (timestamps included)
    }

    /// Ends the merge under way, if any: one segment goes as received,
    /// several as one GSO frame with fixed-up lengths and checksums.
    pub fn flush<E>(&mut self, emit: &mut impl FnMut(Frame<H>, RxMeta) -> Result<(), E>) -> Result<(), E> {
        let segments = self.pieces.len() as u32;
        let emitted = match segments {
            0 => return Ok(()),
            1 => emit(self.held(), RxMeta::Plain { csum_valid: true }),
            _ => {
                let (ip, tcp) = (ETH_HLEN, ETH_HLEN + IP_HLEN);
                let head = &mut self.head;
                head[ip + 2..ip + 4].copy_from_slice(&(self.ip_len as u16).to_be_bytes());
                head[ip + 10..ip + 12].fill(0);
                let ip_sum = !fold(sum(&head[ip..tcp], 0));
                head[ip + 10..ip + 12].copy_from_slice(&ip_sum.to_be_bytes());
                // The pseudo header's sum, uncomplemented: what the stack leaves in
                // the field of a CHECKSUM_PARTIAL frame.
                let tcp_len = (self.ip_len - IP_HLEN) as u32;
                let pseudo = fold(sum(&head[ip + 12..ip + 20], (IPPROTO_TCP as u32 + tcp_len) as u64));
                head[tcp + 16..tcp + 18].copy_from_slice(&pseudo.to_be_bytes());
                let hdr_len = head.len() as u16;
                emit(self.held(), RxMeta::Tcp4 { segments, gso_size: self.gso_size as u16, csum_start: tcp as u16, hdr_len })
            }
        };
        self.pieces.clear();
        emitted
    }

    fn held(&self) -> Frame<'_, H> {
        Frame { head: &self.head, pieces: &self.pieces }
    }

    /// Forgets the merge under way without emitting it: its frames' buffers
    /// are no longer the caller's (a driver died and they were reclaimed).
    pub fn discard(&mut self) {
        self.pieces.clear();
    }
}

/// The ones' complement sum of big-endian 16-bit words, not yet folded.
///
/// It is the daemon's largest cost on receive (every segment QEMU's e1000
/// hands over unchecked), so it takes 8 bytes a step in a plain add-with-
/// carry chain: the sum does not depend on the byte order it is taken in
/// (RFC 1071), so native words are added and the result swapped once. A
/// chain the compiler cannot vectorise matters here: the lab's TCG runs SSE
/// code an order of magnitude slower than scalar code, and the 16-bit
/// loop this replaces was vectorised into half of all the daemon's time.
fn sum(bytes: &[u8], initial: u64) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut acc = 0u64;
    let mut carries = 0u64;
    for w in &mut words {
        let (s, carry) = acc.overflowing_add(u64::from_ne_bytes(w.try_into().unwrap()));
        acc = s;
        carries += carry as u64;
    }
    // The tail starts at an even offset: zero-padded, its bytes keep their
    // places in their 16-bit words. 2^64 ≡ 1 in this arithmetic, so every
    // carry out of `acc` counts 1.
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    let (s, carry) = acc.overflowing_add(u64::from_ne_bytes(tail));
    let native = fold((s & 0xffff_ffff) + (s >> 32) + carries + carry as u64);
    initial + u16::from_be(native) as u64
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1448;

    /// A TCP/IPv4 segment from 10.0.2.2:5201 to 10.0.2.15:40000, with a
    /// timestamp option, `payload` bytes of `fill`, and valid checksums.
    fn segment(seq: u32, payload: usize, fill: u8, flags: u8) -> Vec<u8> {
        let tcp_hlen = 32;
        let ip_len = IP_HLEN + tcp_hlen + payload;
        let mut f = vec![0u8; ETH_HLEN + ip_len];
        f[..6].copy_from_slice(&[0x52, 0x54, 0, 0x12, 0x34, 0x56]);
        f[6..12].copy_from_slice(&[0x52, 0x55, 10, 0, 2, 2]);
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let ip = &mut f[ETH_HLEN..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = IPPROTO_TCP;
        ip[12..16].copy_from_slice(&[10, 0, 2, 2]);
        ip[16..20].copy_from_slice(&[10, 0, 2, 15]);
        let ip_sum = !fold(sum(&ip[..IP_HLEN], 0));
        ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
        let tcp = &mut ip[IP_HLEN..];
        tcp[0..2].copy_from_slice(&5201u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&40000u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&777u32.to_be_bytes());
        tcp[12] = (tcp_hlen as u8 / 4) << 4;
        tcp[13] = flags;
        tcp[14..16].copy_from_slice(&502u16.to_be_bytes());
        tcp[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 7]);
        tcp[tcp_hlen..].fill(fill);
        let tcp_len = (IP_HLEN + tcp_hlen + payload - IP_HLEN) as u32;
        let tcp_sum = !fold(sum(&f[ETH_HLEN + IP_HLEN..], sum(&f[ETH_HLEN + 12..ETH_HLEN + 20], (IPPROTO_TCP as u32 + tcp_len) as u64)));
        f[ETH_HLEN + IP_HLEN + 16..ETH_HLEN + IP_HLEN + 18].copy_from_slice(&tcp_sum.to_be_bytes());
        f
    }

    /// The frame as the TAP gets it, from its head and pieces of `frames`.
    fn gather(f: &Frame<usize>, frames: &[Vec<u8>]) -> Vec<u8> {
        let mut out = f.head.to_vec();
        for p in f.pieces {
            out.extend_from_slice(&frames[p.from][p.start..p.start + p.len]);
        }
        out
    }

    /// Pushes every frame (its handle: its index) and flushes; checks that
    /// each frame is the source of exactly one piece, in order.
    fn run(frames: &[(Vec<u8>, bool)]) -> Vec<(Vec<u8>, RxMeta)> {
        let bytes: Vec<Vec<u8>> = frames.iter().map(|(f, _)| f.clone()).collect();
        let (mut out, mut sources) = (Vec::new(), Vec::new());
        let mut c = Coalescer::default();
        let mut emit = |f: Frame<usize>, m: RxMeta| -> Result<(), ()> {
            out.push((gather(&f, &bytes), m));
            sources.extend(f.pieces.iter().map(|p| p.from));
            Ok(())
        };
        for (i, (f, valid)) in frames.iter().enumerate() {
            c.push(f, i, *valid, &mut emit).unwrap();
        }
        c.flush(&mut emit).unwrap();
        assert_eq!(sources, (0..frames.len()).collect::<Vec<_>>());
        out
    }

    /// The merged frame checks out as the stack would check it once the TCP
    /// checksum is completed from the pseudo-header sum.
    fn tcp_checksum_completes(f: &[u8]) -> bool {
        let (ip, tcp) = (ETH_HLEN, ETH_HLEN + IP_HLEN);
        let mut done = f.to_vec();
        let completed = !fold(sum(&f[tcp..], 0));
        done[tcp + 16..tcp + 18].copy_from_slice(&completed.to_be_bytes());
        let tcp_len = (f.len() - tcp) as u32;
        fold(sum(&done[tcp..], sum(&done[ip + 12..ip + 20], (IPPROTO_TCP as u32 + tcp_len) as u64))) == 0xffff
    }

    #[test]
    fn the_wide_sum_equals_the_sum_of_big_endian_words_at_every_length() {
        let reference = |bytes: &[u8], initial: u64| -> u16 {
            let mut acc = initial;
            for (i, b) in bytes.iter().enumerate() {
                acc += (*b as u64) << if i % 2 == 0 { 8 } else { 0 };
            }
            fold(acc)
        };
        // Bytes that make every 64-bit step carry, then a pseudo-random mix.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let bytes: Vec<u8> = (0..1600).map(|i| if i < 64 { 0xff } else {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        }).collect();
        for start in 0..9 {
            for len in 0..bytes.len() - start {
                let slice = &bytes[start..start + len];
                assert_eq!(fold(sum(slice, 0x1_2345)), reference(slice, 0x1_2345), "start {start}, length {len}");
            }
        }
    }

    #[test]
    fn consecutive_segments_become_one_gso_frame_with_valid_headers() {
        let segs: Vec<_> = (0..3u8).map(|i| (segment(1000 + i as u32 * MSS as u32, MSS, i, TCP_ACK), true)).collect();
        let out = run(&segs);
        assert_eq!(out.len(), 1);
        let (f, meta) = &out[0];
        assert_eq!(*meta, RxMeta::Tcp4 { segments: 3, gso_size: MSS as u16, csum_start: 34, hdr_len: 66 });
        assert_eq!(f.len(), ETH_HLEN + IP_HLEN + 32 + 3 * MSS);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, f.len() - ETH_HLEN, "IP total length");
        assert_eq!(fold(sum(&f[ETH_HLEN..ETH_HLEN + IP_HLEN], 0)), 0xffff, "IP header checksum");
        assert!(tcp_checksum_completes(f));
        let payload = &f[ETH_HLEN + IP_HLEN + 32..];
        assert!(payload[..MSS].iter().all(|&b| b == 0) && payload[2 * MSS..].iter().all(|&b| b == 2));
    }

    #[test]
    fn a_segment_with_a_bad_checksum_is_not_merged_unless_the_device_checked_it() {
        let good = segment(1000, MSS, 0, TCP_ACK);
        let mut bad = segment(1000 + MSS as u32, MSS, 1, TCP_ACK);
        bad[100] ^= 0x40;
        let out = run(&[(good.clone(), false), (bad.clone(), false)]);
        assert_eq!(out, vec![(good.clone(), RxMeta::Plain { csum_valid: true }), (bad.clone(), RxMeta::Plain { csum_valid: false })],
                   "the stack gets the corrupt segment as it came, to drop it");
        let out = run(&[(good, false), (bad, true)]);
        assert!(matches!(out[..], [(_, RxMeta::Tcp4 { segments: 2, .. })]), "the device's word is taken");
    }

    #[test]
    fn a_gap_or_another_flow_ends_the_merge_and_order_is_kept() {
        let mut other_flow = segment(1000 + 2 * MSS as u32, MSS, 9, TCP_ACK);
        other_flow[ETH_HLEN + IP_HLEN + 1] ^= 1; // source port (the device vouches for it)
        let frames = vec![
            (segment(1000, MSS, 0, TCP_ACK), true),
            (segment(1000 + MSS as u32, MSS, 1, TCP_ACK), true),
            (other_flow, true),
            (segment(1000 + 3 * MSS as u32, MSS, 3, TCP_ACK), true), // a gap: 2 * MSS is missing
            (segment(1000 + 4 * MSS as u32, MSS, 4, TCP_ACK), false), // checked here
        ];
        let out = run(&frames);
        let merged = |segments| RxMeta::Tcp4 { segments, gso_size: MSS as u16, csum_start: 34, hdr_len: 66 };
        assert_eq!(out.iter().map(|(_, m)| *m).collect::<Vec<_>>(),
                   vec![merged(2), RxMeta::Plain { csum_valid: true }, merged(2)]);
        assert_eq!(out[1].0, frames[2].0);
        assert_eq!(&out[2].0[ETH_HLEN + IP_HLEN + 4..ETH_HLEN + IP_HLEN + 8], &(1000 + 3 * MSS as u32).to_be_bytes());
    }

    #[test]
    fn psh_or_a_short_segment_is_the_last_merged_and_other_flags_are_not_merged() {
        let frames = vec![
            (segment(1000, MSS, 0, TCP_ACK), true),
            (segment(1000 + MSS as u32, 100, 1, TCP_ACK | TCP_PSH), true),
            (segment(1000 + MSS as u32 + 100, MSS, 2, TCP_ACK), true),
            (segment(1000 + 2 * MSS as u32 + 100, MSS, 3, TCP_ACK | 0x01), true), // FIN
        ];
        let out = run(&frames);
        assert_eq!(out.len(), 3);
        assert!(matches!(out[0].1, RxMeta::Tcp4 { .. }));
        assert_eq!(out[0].0[ETH_HLEN + IP_HLEN + 13], TCP_ACK | TCP_PSH, "the merged frame keeps PSH");
        assert_eq!(out[1].0, frames[2].0);
        assert_eq!(out[2].0, frames[3].0);
    }

    #[test]
    fn a_merge_stops_below_the_ip_length_limit() {
        let n = MAX_IP_LEN / MSS + 2;
        let frames: Vec<_> = (0..n).map(|i| (segment(1000 + (i * MSS) as u32, MSS, 0, TCP_ACK), true)).collect();
        let out = run(&frames);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(f, _)| f.len() - ETH_HLEN <= MAX_IP_LEN));
        let payloads: usize = out.iter().map(|(f, _)| f.len() - ETH_HLEN - IP_HLEN - 32).sum();
        assert_eq!(payloads, n * MSS);
    }

    #[test]
    fn frames_that_are_not_tcp_over_ipv4_go_through_unchanged() {
        let arp = vec![0xffu8; 60];
        let mut ack_only = segment(1000, 0, 0, TCP_ACK);
        ack_only.truncate(ETH_HLEN + IP_HLEN + 32);
        let out = run(&[(arp.clone(), false), (ack_only.clone(), true)]);
        assert_eq!(out, vec![(arp, RxMeta::Plain { csum_valid: false }), (ack_only, RxMeta::Plain { csum_valid: true })]);
    }

    #[test]
    fn a_merge_holds_at_most_a_budget_of_segments() {
        let n = MAX_SEGMENTS + 3;
        let frames: Vec<_> = (0..n).map(|i| (segment(1000 + (i * 100) as u32, 100, 0, TCP_ACK), true)).collect();
        let out = run(&frames);
        assert_eq!(out.iter().map(|(_, m)| *m).collect::<Vec<_>>(), vec![
            RxMeta::Tcp4 { segments: MAX_SEGMENTS as u32, gso_size: 100, csum_start: 34, hdr_len: 66 },
            RxMeta::Tcp4 { segments: 3, gso_size: 100, csum_start: 34, hdr_len: 66 },
        ]);
    }
}
