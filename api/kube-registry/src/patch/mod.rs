//! Patch formats beyond RFC 6902 / RFC 7386: strategic merge patch for built-in kinds.

pub(crate) mod strategic;
