//! Key-range permissions merged per user, checked as etcd 3.4's range permission cache does.
//!
//! A permission is a half-open interval of keys: an empty `range_end` is the single key
//! (`[key, key\0)`), `range_end = "\0"` is everything from `key` on, anything else is
//! `[key, range_end)`. A single-key request is allowed if any interval holds the key; a range
//! request only if the intervals that overlap it cover it without a gap.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::pb::authpb::{permission::Type as PermType, Role, User};

/// An interval end: `None` is past every key.
type End = Option<Vec<u8>>;

/// A half-open key interval `[begin, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interval {
    begin: Vec<u8>,
    end: End,
}

fn cmp_end(a: &End, b: &End) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(x), Some(y)) => x.cmp(y),
    }
}

/// `key < end`, with `None` past every key.
fn below(key: &[u8], end: &End) -> bool {
    end.as_ref().is_none_or(|e| key < e.as_slice())
}

fn point(key: &[u8]) -> Interval {
    let mut end = key.to_vec();
    end.push(0);
    Interval {
        begin: key.to_vec(),
        end: Some(end),
    }
}

impl Interval {
    /// The interval a stored permission grants.
    fn of_permission(key: &[u8], range_end: &[u8]) -> Interval {
        match range_end {
            [] => point(key),
            [0] => Interval {
                begin: key.to_vec(),
                end: None,
            },
            e => Interval {
                begin: key.to_vec(),
                end: Some(e.to_vec()),
            },
        }
    }

    fn overlaps(&self, other: &Interval) -> bool {
        below(&self.begin, &other.end) && below(&other.begin, &self.end)
    }
}

/// One user's merged READ and WRITE intervals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserPerms {
    read: Vec<Interval>,
    write: Vec<Interval>,
}

/// What an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Read,
    Write,
}

impl UserPerms {
    /// Merges the permissions of every role `user` holds (roles that no longer exist add none).
    pub fn of_user(user: &User, roles: &BTreeMap<String, Role>) -> UserPerms {
        let mut p = UserPerms::default();
        for role in user.roles.iter().filter_map(|r| roles.get(r)) {
            for perm in &role.key_permission {
                let ivl = Interval::of_permission(&perm.key, &perm.range_end);
                match PermType::try_from(perm.perm_type) {
                    Ok(PermType::Read) => p.read.push(ivl),
                    Ok(PermType::Write) => p.write.push(ivl),
                    Ok(PermType::Readwrite) => {
                        p.read.push(ivl.clone());
                        p.write.push(ivl);
                    }
                    Err(_) => {}
                }
            }
        }
        p
    }

    /// True if the request's key (or range) is wholly granted for `need`.
    pub fn allows(&self, need: Need, key: &[u8], range_end: &[u8]) -> bool {
        let set = match need {
            Need::Read => &self.read,
            Need::Write => &self.write,
        };
        if range_end.is_empty() {
            return set
                .iter()
                .any(|i| i.begin.as_slice() <= key && below(key, &i.end));
        }
        let want = Interval {
            begin: key.to_vec(),
            end: (range_end != [0]).then(|| range_end.to_vec()),
        };
        covers(set, &want)
    }
}

/// True if the intervals of `set` that overlap `want` leave no gap inside it.
fn covers(set: &[Interval], want: &Interval) -> bool {
    let mut hits: Vec<&Interval> = set.iter().filter(|i| i.overlaps(want)).collect();
    hits.sort_by(|a, b| a.begin.cmp(&b.begin));
    let Some(first) = hits.first() else {
        return false;
    };
    let mut reach = first.end.clone();
    for i in &hits[1..] {
        // A gap: the next interval starts beyond what is covered so far.
        if !below(&i.begin, &reach) && reach.as_deref() != Some(i.begin.as_slice()) {
            return false;
        }
        if cmp_end(&i.end, &reach) == Ordering::Greater {
            reach = i.end.clone();
        }
    }
    first.begin <= want.begin && cmp_end(&reach, &want.end) != Ordering::Less
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::authpb::Permission;

    fn perms(list: &[(PermType, &str, &[u8])]) -> UserPerms {
        let role = Role {
            name: bytes::Bytes::from_static(b"r"),
            key_permission: list
                .iter()
                .map(|(t, k, e)| Permission {
                    perm_type: *t as i32,
                    key: bytes::Bytes::copy_from_slice(k.as_bytes()),
                    range_end: bytes::Bytes::copy_from_slice(e),
                })
                .collect(),
        };
        let user = User {
            name: bytes::Bytes::from_static(b"u"),
            roles: vec!["r".into()],
            ..Default::default()
        };
        UserPerms::of_user(&user, &BTreeMap::from([("r".to_string(), role)]))
    }

    #[test]
    fn prefix_read_only() {
        let p = perms(&[(PermType::Read, "/ro/", b"/ro0")]);
        assert!(p.allows(Need::Read, b"/ro/a", b""));
        assert!(p.allows(Need::Read, b"/ro/", b"/ro0"));
        assert!(p.allows(Need::Read, b"/ro/a", b"/ro/b"));
        assert!(!p.allows(Need::Read, b"/ro/", b"\0"));
        assert!(!p.allows(Need::Read, b"/other", b""));
        assert!(!p.allows(Need::Write, b"/ro/a", b""));
    }

    #[test]
    fn adjacent_intervals_cover_together_and_gaps_do_not() {
        let p = perms(&[
            (PermType::Readwrite, "a", b"c"),
            (PermType::Read, "c", b"e"),
            (PermType::Read, "f", b"\0"),
        ]);
        assert!(p.allows(Need::Read, b"a", b"e"));
        assert!(!p.allows(Need::Read, b"a", b"g"));
        assert!(p.allows(Need::Read, b"f", b"\0"));
        assert!(p.allows(Need::Write, b"b", b""));
        assert!(!p.allows(Need::Write, b"c", b""));
    }

    #[test]
    fn single_key_permission() {
        let p = perms(&[(PermType::Write, "k", b"")]);
        assert!(p.allows(Need::Write, b"k", b""));
        assert!(!p.allows(Need::Write, b"k0", b""));
        assert!(p.allows(Need::Write, b"k", b"k\0"));
        assert!(!p.allows(Need::Write, b"k", b"l"));
    }
}
