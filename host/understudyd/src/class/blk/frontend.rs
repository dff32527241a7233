// SPDX-License-Identifier: GPL-2.0
//! The disk applications see: `/dev/nbdN`, whose kernel client is
//! connected to one socket pair per hardware queue (docs/design.md §11,
//! "The front-end is the kernel's NBD client"). The kernel's ends go to
//! nbd.ko; the daemon keeps its ends for as long as it serves the disk,
//! across every driver restart, so the kernel never sees a driver die: it
//! waits for its replies.
//!
//! Each connection is read into whole requests (understudy_nbd), handed
//! to the datapath, and answered in the order the datapath finishes them
//! (NBD matches replies by handle, not by order).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

use log::{info, warn};
use understudy_nbd::{Connection, ConnectionError, Export};
use understudy_shm::ShmError;

use super::datapath::{Datapath, Reply};

/// The most bytes nbd.ko sends in one request (its max_hw_sectors, 32 MiB).
pub const MAX_REQUEST: u32 = 32 << 20;

pub struct Frontend {
    /// The daemon's ends, by connection; `None` once the kernel closed one.
    connections: Vec<Option<Connection>>,
    /// N of `/dev/nbdN`, once connected.
    index: Option<u32>,
    label: String,
}

/// Why a connection stopped: the kernel's doing, or the driver's garbage
/// met while its request was taken (which ends the driver, not the disk).
#[derive(Debug)]
pub enum Stopped {
    Connection(ConnectionError),
    Driver(ShmError),
}

impl Frontend {
    /// `queues` socket pairs: the front-end keeps its ends; the kernel's
    /// are returned, for `connect` (or a test's client).
    pub fn new(queues: u16, label: String) -> io::Result<(Frontend, Vec<UnixStream>)> {
        let mut connections = Vec::new();
        let mut kernel_ends = Vec::new();
        for _ in 0..queues.max(1) {
            let (ours, theirs) = UnixStream::pair()?;
            connections.push(Some(Connection::new(ours)?));
            kernel_ends.push(theirs);
        }
        Ok((Frontend { connections, index: None, label }, kernel_ends))
    }

    /// Connects a new `/dev/nbdN` to the kernel's ends (nbd.ko takes its own
    /// references; ours are closed) and returns its path.
    pub fn connect(&mut self, export: &Export, kernel_ends: Vec<UnixStream>) -> io::Result<String> {
        let fds: Vec<BorrowedFd> = kernel_ends.iter().map(|s| s.as_fd()).collect();
        let index = understudy_nbd::connect(export, &fds)?;
        self.index = Some(index);
        let path = format!("/dev/nbd{index}");
        info!("{}: the disk is {path}: {} bytes in {}-byte blocks, {} connection(s)", self.label, export.size_bytes,
              export.block_size, self.connections.len());
        Ok(path)
    }

    /// The open connections' fds, each with whether it waits to write.
    pub fn poll_fds(&self) -> Vec<(usize, BorrowedFd<'_>, bool)> {
        self.connections.iter().enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c.as_fd(), c.wants_write())))
            .collect()
    }

    /// Takes what connection `conn` holds to the datapath.
    pub fn receive(&mut self, conn: usize, datapath: &mut Datapath) -> Result<(), Stopped> {
        let Some(c) = self.connections.get_mut(conn).and_then(Option::as_mut) else { return Ok(()) };
        let incoming = match c.receive(MAX_REQUEST) {
            Ok(incoming) => incoming,
            Err(e) => {
                self.close(conn, &e);
                return Err(Stopped::Connection(e));
            }
        };
        for request in incoming {
            datapath.accept(conn, request).map_err(Stopped::Driver)?;
        }
        Ok(())
    }

    /// Queues the datapath's answers on their connections and writes what
    /// the sockets take. An answer for a connection the kernel closed is
    /// dropped: nbd.ko has failed or resent its request by then.
    pub fn answer(&mut self, replies: Vec<Reply>) {
        for r in replies {
            if let Some(c) = self.connections.get_mut(r.conn).and_then(Option::as_mut) {
                c.queue_reply(r.handle, r.errno, &r.data);
            }
        }
        for conn in 0..self.connections.len() {
            self.write(conn);
        }
    }

    /// Writes what connection `conn`'s socket takes.
    pub fn write(&mut self, conn: usize) {
        let Some(c) = self.connections.get_mut(conn).and_then(Option::as_mut) else { return };
        if let Err(e) = c.flush() {
            self.close(conn, &ConnectionError::Io(e));
        }
    }

    fn close(&mut self, conn: usize, why: &ConnectionError) {
        if self.connections[conn].take().is_some() {
            match why {
                ConnectionError::Closed => info!("{}: NBD connection {conn} closed by the kernel", self.label),
                e => warn!("{}: NBD connection {conn} ended: {e}", self.label),
            }
        }
    }

    /// Connections the kernel still holds.
    pub fn open(&self) -> usize {
        self.connections.iter().flatten().count()
    }

    /// Takes `/dev/nbdN` down (the disk is released): what the kernel
    /// still has queued fails there with an error.
    pub fn disconnect(&mut self) {
        if let Some(index) = self.index.take() {
            if let Err(e) = understudy_nbd::disconnect(index) {
                warn!("{}: {e}", self.label);
            }
        }
        self.connections.clear();
    }
}

impl Drop for Frontend {
    fn drop(&mut self) {
        self.disconnect();
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use understudy_nbd::{reply, Command, NbdRequest, REPLY_LEN};
    use understudy_protocol::{BLK_OP_READ, BLK_OP_WRITE, DISK_WRITE_CACHE};

    use super::*;
    use crate::class::blk::model::{datapath, pattern, Model};

    fn send(client: &mut UnixStream, command: Command, handle: u8, offset: u64, len: u32, data: &[u8]) {
        client.write_all(&NbdRequest { command, handle: [handle; 8], offset, len }.encode()).unwrap();
        client.write_all(data).unwrap();
    }

    fn answer(client: &mut UnixStream, len: usize) -> Vec<u8> {
        let mut got = vec![0; REPLY_LEN + len];
        client.read_exact(&mut got).unwrap();
        got
    }

    #[test]
    fn each_connection_is_answered_on_itself_and_feeds_its_own_queue() {
        let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
        let mut model = Model::default();
        let (mut fe, mut clients) = Frontend::new(2, "test".into()).unwrap();
        send(&mut clients[0], Command::Write { fua: false }, 1, 8192, 4096, &pattern(1, 4096));
        fe.receive(0, &mut dp).unwrap();
        model.serve_all(&driver, &mut dp);
        fe.answer(dp.take_replies());
        assert_eq!(answer(&mut clients[0], 0), reply([1; 8], 0));
        send(&mut clients[1], Command::Read, 2, 8192, 4096, &[]);
        fe.receive(1, &mut dp).unwrap();
        model.serve_all(&driver, &mut dp);
        fe.answer(dp.take_replies());
        let got = answer(&mut clients[1], 4096);
        assert_eq!((&got[..REPLY_LEN], &got[REPLY_LEN..]), (&reply([2; 8], 0)[..], &pattern(1, 4096)[..]));
        assert_eq!(model.seen, vec![(BLK_OP_WRITE, 16, 4096, 0), (BLK_OP_READ, 16, 4096, 1)]);
    }

    #[test]
    fn a_connection_the_kernel_closed_is_dropped_and_the_others_serve_on() {
        let (mut dp, driver) = datapath(DISK_WRITE_CACHE);
        let mut model = Model::default();
        let (mut fe, mut clients) = Frontend::new(2, "test".into()).unwrap();
        drop(clients.remove(0));
        assert!(matches!(fe.receive(0, &mut dp), Err(Stopped::Connection(ConnectionError::Closed))));
        assert_eq!((fe.open(), fe.poll_fds().len()), (1, 1));
        send(&mut clients[0], Command::Read, 3, 0, 512, &[]);
        fe.receive(1, &mut dp).unwrap();
        model.serve_all(&driver, &mut dp);
        fe.answer(dp.take_replies());
        assert_eq!(answer(&mut clients[0], 512)[..REPLY_LEN], reply([3; 8], 0));
    }

    #[test]
    fn garbage_from_the_kernel_ends_its_connection_only() {
        let (mut dp, _driver) = datapath(DISK_WRITE_CACHE);
        let (mut fe, mut clients) = Frontend::new(1, "test".into()).unwrap();
        clients[0].write_all(&[0xee; 28]).unwrap();
        assert!(matches!(fe.receive(0, &mut dp), Err(Stopped::Connection(ConnectionError::Wire(_)))));
        assert_eq!((fe.open(), dp.unanswered()), (0, 0));
    }
}
