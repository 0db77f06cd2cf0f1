//! etcd's "simple" tokens: `<16 random letters>.<Raft index of the Authenticate entry>`.
//!
//! Every member applies the Authenticate entry and so learns the token; tokens live in memory
//! only (a restarted member forgets them, as etcd's do). A token expires after its TTL without
//! use; each use starts the TTL again. Expired tokens are dropped when looked up or when a new
//! one is assigned, so no timer task is needed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// etcd's default `--auth-token-ttl`.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(300);

/// The tokens this member knows.
#[derive(Debug)]
pub struct SimpleTokens {
    ttl: Duration,
    map: Mutex<HashMap<String, (String, Instant)>>,
}

impl SimpleTokens {
    /// No tokens; each will live `ttl` after its last use.
    pub fn new(ttl: Duration) -> Self {
        SimpleTokens {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Records `token` for `user`.
    pub fn assign(&self, token: String, user: String) {
        let now = Instant::now();
        let mut m = self.map.lock();
        m.retain(|_, (_, deadline)| *deadline > now);
        m.insert(token, (user, now + self.ttl));
    }

    /// The user of a live token, renewing its TTL.
    pub fn user(&self, token: &str) -> Option<String> {
        let now = Instant::now();
        let mut m = self.map.lock();
        match m.get_mut(token) {
            Some((user, deadline)) if *deadline > now => {
                *deadline = now + self.ttl;
                Some(user.clone())
            }
            Some(_) => {
                m.remove(token);
                None
            }
            None => None,
        }
    }

    /// Forgets every token of `user` (deleted, or its password changed).
    pub fn invalidate_user(&self, user: &str) {
        self.map.lock().retain(|_, (u, _)| u != user);
    }

    /// Forgets every token (auth disabled).
    pub fn clear(&self) {
        self.map.lock().clear();
    }
}

/// The Raft index a token names (the part after the dot), if it has etcd's shape.
pub fn token_index(token: &str) -> Option<u64> {
    let (_, index) = token.split_once('.')?;
    if index.contains('.') {
        return None;
    }
    index.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_renewal_and_invalidation() {
        let t = SimpleTokens::new(Duration::from_millis(50));
        t.assign("abc.7".into(), "alice".into());
        t.assign("def.8".into(), "bob".into());
        assert_eq!(t.user("abc.7").as_deref(), Some("alice"));
        t.invalidate_user("alice");
        assert_eq!(t.user("abc.7"), None);
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(t.user("def.8"), None);
        assert_eq!(token_index("abc.7"), Some(7));
        assert_eq!(token_index("abc"), None);
        assert_eq!(token_index("a.b.7"), None);
    }
}
