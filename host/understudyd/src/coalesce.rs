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

const ETH_HLEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const IPPROTO_TCP: u8 = 6;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;
const IP_HLEN: usize = 20;
/// An IPv4 packet's length is 16 bits.
const MAX_IP_LEN: usize = 65535;

/// The parts of a mergeable segment the rules look at.
struct Segment<'a> {
    frame: &'a [u8],
    tcp_hlen: usize,
    payload: usize,
    seq: u32,
    psh: bool,
}

impl Segment<'_> {
    fn parse(frame: &[u8]) -> Option<Segment<'_>> {
        let ip = frame.get(ETH_HLEN..)?;
        if u16::from_be_bytes([frame[12], frame[13]]) != ETHERTYPE_IPV4 || ip.len() < IP_HLEN {
            return None;
        }
        // Version 4, no options; not a fragment (DF may be set); TCP.
        let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        if ip[0] != 0x45 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 || ip[9] != IPPROTO_TCP
            || total > ip.len() || total < IP_HLEN + 20 {
            return None;
        }
        let tcp = &ip[IP_HLEN..total];
        let tcp_hlen = (tcp[12] >> 4) as usize * 4;
        let flags = tcp[13];
        if tcp_hlen < 20 || tcp_hlen >= tcp.len() || flags & !TCP_PSH != TCP_ACK {
            return None;
        }
        Some(Segment {
            frame: &frame[..ETH_HLEN + total],
            tcp_hlen,
            payload: tcp.len() - tcp_hlen,
            seq: u32::from_be_bytes(tcp[4..8].try_into().unwrap()),
            psh: flags & TCP_PSH != 0,
        })
    }

    fn headers(&self) -> &[u8] {
        &self.frame[..ETH_HLEN + IP_HLEN + self.tcp_hlen]
    }

    /// The TCP checksum over the pseudo header and the segment checks out.
    fn checksum_ok(&self) -> bool {
        let (ip, tcp) = (ETH_HLEN, ETH_HLEN + IP_HLEN);
        let tcp_len = (self.frame.len() - tcp) as u32;
        fold(sum(&self.frame[tcp..], sum(&self.frame[ip + 12..ip + 20], (IPPROTO_TCP as u32 + tcp_len) as u64))) == 0xffff
    }
}

/// The merge under way: the first segment's headers and every payload so far.
pub struct Coalescer {
    frame: Vec<u8>,
    /// Header bytes of the merged frame (Ethernet, IP, TCP).
    hlen: usize,
    segments: u32,
    gso_size: usize,
    next_seq: u32,
    /// A PSH or a short segment ended it: the next frame starts anew.
    closed: bool,
}

impl Default for Coalescer {
    fn default() -> Self {
        Coalescer { frame: Vec::with_capacity(MAX_IP_LEN + ETH_HLEN), hlen: 0, segments: 0, gso_size: 0, next_seq: 0, closed: false }
    }
}

impl Coalescer {
    /// Takes the next received frame; `emit` gets every frame that is
    /// complete, in the order received.
    pub fn push<E>(&mut self, frame: &[u8], csum_valid: bool, emit: &mut impl FnMut(&[u8], RxMeta) -> Result<(), E>)
                   -> Result<(), E> {
        let segment = Segment::parse(frame).filter(|s| s.payload > 0 && (csum_valid || s.checksum_ok()));
        let Some(segment) = segment else {
            self.flush(emit)?;
            return emit(frame, RxMeta::Plain { csum_valid });
        };
        if self.segments > 0 && !self.continues(&segment) {
            self.flush(emit)?;
        }
        if self.segments == 0 {
            self.frame.clear();
            self.frame.extend_from_slice(segment.frame);
            self.hlen = segment.headers().len();
            self.gso_size = segment.payload;
        } else {
            self.frame.extend_from_slice(&segment.frame[segment.headers().len()..]);
            if segment.psh {
                self.frame[ETH_HLEN + IP_HLEN + 13] |= TCP_PSH;
            }
        }
        self.segments += 1;
        self.next_seq = segment.seq.wrapping_add(segment.payload as u32);
        self.closed = segment.psh || segment.payload < self.gso_size;
        Ok(())
    }

    /// Whether `s` is the next segment of the held flow, as GRO decides it.
    fn continues(&self, s: &Segment) -> bool {
        let held = &self.frame[..self.hlen];
        let ip = ETH_HLEN;
        let tcp = ip + IP_HLEN;
        let same = |a: usize, b: usize| held[a..b] == s.frame[a..b];
        !self.closed
            && s.headers().len() == self.hlen
            && s.seq == self.next_seq
            && s.payload <= self.gso_size
            && self.frame.len() - ETH_HLEN + s.payload <= MAX_IP_LEN
            && same(0, 14)                  // MACs and type
            && same(ip + 1, ip + 2)         // TOS
            && same(ip + 8, ip + 10)        // TTL, protocol
            && same(ip + 12, ip + 20)       // addresses
            && same(tcp, tcp + 4)           // ports
            && same(tcp + 8, tcp + 12)      // acknowledgement
            && same(tcp + 14, tcp + 16)     // window
            && same(tcp + 20, self.hlen)    // options (timestamps included)
    }

    /// Ends the merge under way, if any: one segment goes as received,
    /// several as one GSO frame with fixed-up lengths and checksums.
    pub fn flush<E>(&mut self, emit: &mut impl FnMut(&[u8], RxMeta) -> Result<(), E>) -> Result<(), E> {
        let segments = std::mem::take(&mut self.segments);
        if segments == 0 {
            return Ok(());
        }
        if segments == 1 {
            return emit(&self.frame, RxMeta::Plain { csum_valid: true });
        }
        let (ip, tcp) = (ETH_HLEN, ETH_HLEN + IP_HLEN);
        let ip_len = self.frame.len() - ETH_HLEN;
        self.frame[ip + 2..ip + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        self.frame[ip + 10..ip + 12].fill(0);
        let ip_sum = !fold(sum(&self.frame[ip..tcp], 0));
        self.frame[ip + 10..ip + 12].copy_from_slice(&ip_sum.to_be_bytes());
        // The pseudo header's sum, uncomplemented: what the stack leaves in
        // the field of a CHECKSUM_PARTIAL frame.
        let tcp_len = (ip_len - IP_HLEN) as u32;
        let pseudo = fold(sum(&self.frame[ip + 12..ip + 20], (IPPROTO_TCP as u32 + tcp_len) as u64));
        self.frame[tcp + 16..tcp + 18].copy_from_slice(&pseudo.to_be_bytes());
        emit(&self.frame, RxMeta::Tcp4 { segments, gso_size: self.gso_size as u16, csum_start: tcp as u16, hdr_len: self.hlen as u16 })
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

    fn run(frames: &[(Vec<u8>, bool)]) -> Vec<(Vec<u8>, RxMeta)> {
        let mut out = Vec::new();
        let mut c = Coalescer::default();
        let mut emit = |f: &[u8], m: RxMeta| -> Result<(), ()> {
            out.push((f.to_vec(), m));
            Ok(())
        };
        for (f, valid) in frames {
            c.push(f, *valid, &mut emit).unwrap();
        }
        c.flush(&mut emit).unwrap();
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
}
