// SPDX-License-Identifier: GPL-2.0
//! The kernel's NBD client (`nbd.ko`) as understudyd's block front-end
//! (docs/design.md §11): applications see `/dev/nbdN`, an ordinary disk,
//! and understudyd is its server, on sockets it holds across every driver
//! restart. The kernel never sees a block driver die: it waits for its
//! answers, which come once a driver — this one or its successor — has
//! completed the request.
//!
//! `wire` is the transmission phase's format (the kernel's requests and
//! understudyd's replies), `connection` one socket's server end, `connect`
//! the configuration over generic netlink (the `nbd` family of
//! include/uapi/linux/nbd-netlink.h).

pub mod connect;
pub mod connection;
pub mod split;
pub mod wire;

pub use connect::{connect, disconnect, Export};
pub use connection::{Connection, ConnectionError, Incoming};
pub use split::{check_range, pieces, Piece, Refusal};
pub use wire::{reply, Command, NbdRequest, WireError, REPLY_LEN, REQUEST_LEN};
