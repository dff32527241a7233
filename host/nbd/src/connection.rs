// SPDX-License-Identifier: GPL-2.0
//! One NBD connection, the server's end: nonblocking and buffered both
//! ways, so that one slow socket never stalls the daemon's loop. What the
//! kernel sends is read into whole requests (a write with all its data);
//! replies are queued and written as the socket takes them.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

use crate::wire::{reply, Command, NbdRequest, WireError, REQUEST_LEN};

/// A request as the kernel sent it, with a write's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    pub request: NbdRequest,
    pub data: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("a {0}-byte write, more than the {1} bytes the export takes at once")]
    TooLong(u32, u32),
    #[error("the client closed the connection")]
    Closed,
    #[error("NBD socket: {0}")]
    Io(#[from] io::Error),
}

pub struct Connection {
    stream: UnixStream,
    /// Bytes of a request header read so far.
    header: Vec<u8>,
    /// A write whose data is still arriving.
    partial: Option<Incoming>,
    /// Replies not yet taken by the socket.
    out: VecDeque<u8>,
}

impl Connection {
    pub fn new(stream: UnixStream) -> io::Result<Connection> {
        stream.set_nonblocking(true)?;
        Ok(Connection { stream, header: Vec::with_capacity(REQUEST_LEN), partial: None, out: VecDeque::new() })
    }

    /// Everything whole the socket holds now; a write of more than
    /// `max_write` bytes is refused (the export's size bounds the rest).
    pub fn receive(&mut self, max_write: u32) -> Result<Vec<Incoming>, ConnectionError> {
        let mut whole = Vec::new();
        loop {
            if let Some(p) = &mut self.partial {
                let have = p.data.len();
                let want = p.request.len as usize;
                if have == want {
                    whole.push(self.partial.take().expect("partial"));
                    continue;
                }
                p.data.resize(want, 0);
                match self.stream.read(&mut p.data[have..]) {
                    Ok(0) => return Err(ConnectionError::Closed),
                    Ok(n) => p.data.truncate(have + n),
                    Err(e) => {
                        p.data.truncate(have);
                        return blocked(e, whole);
                    }
                }
                continue;
            }
            let have = self.header.len();
            self.header.resize(REQUEST_LEN, 0);
            match self.stream.read(&mut self.header[have..]) {
                Ok(0) => return Err(ConnectionError::Closed),
                Ok(n) => self.header.truncate(have + n),
                Err(e) => {
                    self.header.truncate(have);
                    return blocked(e, whole);
                }
            }
            if self.header.len() < REQUEST_LEN {
                continue;
            }
            let bytes: [u8; REQUEST_LEN] = self.header[..].try_into().expect("a whole header");
            self.header.clear();
            let request = NbdRequest::parse(&bytes)?;
            match request.command {
                Command::Write { .. } if request.len > max_write => return Err(ConnectionError::TooLong(request.len, max_write)),
                Command::Write { .. } => self.partial = Some(Incoming { request, data: Vec::with_capacity(request.len as usize) }),
                _ => whole.push(Incoming { request, data: Vec::new() }),
            }
        }
    }

    /// Queues the reply to `handle`: `errno` 0 with a read's `data`, else
    /// the error alone.
    pub fn queue_reply(&mut self, handle: [u8; 8], errno: u32, data: &[u8]) {
        self.out.extend(reply(handle, errno));
        if errno == 0 {
            self.out.extend(data);
        }
    }

    /// Writes what the socket takes; true once nothing is left.
    pub fn flush(&mut self) -> io::Result<bool> {
        while !self.out.is_empty() {
            let (front, _) = self.out.as_slices();
            match self.stream.write(front) {
                Ok(n) => drop(self.out.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Whether replies wait for the socket to take them.
    pub fn wants_write(&self) -> bool {
        !self.out.is_empty()
    }
}

fn blocked(e: io::Error, whole: Vec<Incoming>) -> Result<Vec<Incoming>, ConnectionError> {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(whole),
        _ => Err(e.into()),
    }
}

impl AsFd for Connection {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Connection, UnixStream) {
        let (server, client) = UnixStream::pair().unwrap();
        (Connection::new(server).unwrap(), client)
    }

    fn request(command: Command, handle: u8, offset: u64, len: u32) -> NbdRequest {
        NbdRequest { command, handle: [handle; 8], offset, len }
    }

    #[test]
    fn requests_that_arrive_in_pieces_are_read_whole() {
        let (mut conn, mut client) = pair();
        let write = request(Command::Write { fua: false }, 1, 4096, 1024);
        let read = request(Command::Read, 2, 0, 512);
        let mut bytes = write.encode().to_vec();
        bytes.extend(std::iter::repeat_n(0x5a, 1024));
        bytes.extend(read.encode());
        // The socket gives the daemon 10 bytes at a time.
        let mut got = Vec::new();
        for chunk in bytes.chunks(10) {
            client.write_all(chunk).unwrap();
            got.extend(conn.receive(1 << 20).unwrap());
        }
        assert_eq!(got, vec![Incoming { request: write, data: vec![0x5a; 1024] }, Incoming { request: read, data: vec![] }]);
        assert!(conn.receive(1 << 20).unwrap().is_empty());
    }

    #[test]
    fn a_reply_carries_a_reads_data_and_an_errors_errno_alone() {
        let (mut conn, mut client) = pair();
        conn.queue_reply([3; 8], 0, &[1, 2, 3, 4]);
        conn.queue_reply([4; 8], 5, &[9; 100]);
        assert!(conn.flush().unwrap() && !conn.wants_write());
        let mut got = [0u8; 16 + 4 + 16];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got[..16], &reply([3; 8], 0));
        assert_eq!(&got[16..20], &[1, 2, 3, 4]);
        assert_eq!(&got[20..], &reply([4; 8], 5));
    }

    #[test]
    fn garbage_an_overlong_write_and_a_close_end_the_connection() {
        let (mut conn, mut client) = pair();
        client.write_all(&[0xff; REQUEST_LEN]).unwrap();
        assert!(matches!(conn.receive(1 << 20), Err(ConnectionError::Wire(WireError::Magic(_)))));
        let (mut conn, mut client) = pair();
        client.write_all(&request(Command::Write { fua: true }, 1, 0, 1 << 21).encode()).unwrap();
        assert!(matches!(conn.receive(1 << 20), Err(ConnectionError::TooLong(..))));
        let (mut conn, client) = pair();
        drop(client);
        assert!(matches!(conn.receive(1 << 20), Err(ConnectionError::Closed)));
    }

    #[test]
    fn replies_wait_for_a_full_socket() {
        let (mut conn, mut client) = pair();
        let data = vec![7u8; 4 << 20];
        conn.queue_reply([1; 8], 0, &data);
        assert!(!conn.flush().unwrap(), "4 MiB fit a socket buffer");
        assert!(conn.wants_write());
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; 16 + (4 << 20)];
            client.read_exact(&mut got).unwrap();
            got
        });
        while !conn.flush().unwrap() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let got = reader.join().unwrap();
        assert!(got[16..].iter().all(|&b| b == 7));
    }
}
