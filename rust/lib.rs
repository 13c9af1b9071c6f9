//! pinlater's native core. Pure-Rust modules have no `PyO3` types; `py/` holds the bindings.

pub mod body_filter;
pub mod broker;
pub mod decimal;
pub mod descriptor;
pub mod error;
pub mod mysql_rows;
pub mod py;
pub mod ratelimit;
pub mod redis_pack;
pub mod redis_rows;
pub mod runtime;
pub mod thrift_reply;
pub mod thrift_walk;

/// The wire contract, embedded at compile time so the wheel cannot carry a stale copy.
pub const THRIFT_IDL: &str = include_str!("../thrift/pinlater.thrift");
