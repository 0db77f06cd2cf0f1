//! Authorization.

pub mod bootstrap;
