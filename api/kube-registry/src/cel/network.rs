//! Kubernetes' CEL IP and CIDR library: `ip(s)`, `ip.isCanonical(s)`, and on an IP `family()`,
//! `isUnspecified()`, `isLoopback()`, `isLinkLocalMulticast()`, `isLinkLocalUnicast()`,
//! `isGlobalUnicast()`; `cidr(s)`, and on a CIDR `containsIP(ip|s)`, `containsCIDR(cidr|s)`, `ip()`,
//! `masked()`, `prefixLength()`; `string()` of either. IPv4-mapped IPv6 addresses and zones are refused,
//! as upstream refuses them.

use std::net::IpAddr;
use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::{Context, FunctionContext, Value};

use super::typed;

type Result<T> = std::result::Result<T, cel::ExecutionError>;

const IP: &str = "net.IP";
const CIDR: &str = "net.CIDR";
/// The receiver of `ip.isCanonical(…)`.
const IP_NAMESPACE: &str = "net.IPFunctions";

fn parse_ip(s: &str) -> Option<IpAddr> {
    let ip: IpAddr = s.parse().ok()?;
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => None,
        _ => Some(ip),
    }
}

fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = s.split_once('/')?;
    let ip = parse_ip(addr)?;
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    // Go refuses leading zeros in the length ("/08").
    let written = s.split_once('/')?.1;
    (len <= max && len.to_string() == written).then_some((ip, len))
}

fn ip_value(ip: IpAddr) -> Value {
    typed::make(IP, vec![("value", typed::string(ip.to_string()))])
}

fn cidr_value(ip: IpAddr, len: u8) -> Value {
    typed::make(CIDR, vec![("value", typed::string(format!("{ip}/{len}")))])
}

fn ip_of(ftx: &FunctionContext, v: &Value) -> Result<IpAddr> {
    let f = typed::receiver(ftx, v, IP)?;
    parse_ip(&typed::text(f, "value")).ok_or_else(|| ftx.error("invalid IP"))
}

fn cidr_of(ftx: &FunctionContext, v: &Value) -> Result<(IpAddr, u8)> {
    let f = typed::receiver(ftx, v, CIDR)?;
    parse_cidr(&typed::text(f, "value")).ok_or_else(|| ftx.error("invalid CIDR"))
}

/// The address with every bit past `len` cleared.
fn masked(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let mask = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len))
            };
            IpAddr::V4((bits & mask).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            IpAddr::V6((bits & mask).into())
        }
    }
}

fn contains(net: (IpAddr, u8), ip: IpAddr) -> bool {
    net.0.is_ipv4() == ip.is_ipv4() && masked(net.0, net.1) == masked(ip, net.1)
}

/// `ip(s)`; `ip` alone is the receiver of `ip.isCanonical`.
fn ip(ftx: &FunctionContext, Arguments(args): Arguments) -> Result<Value> {
    match args.first() {
        Some(Value::String(s)) => parse_ip(s).map(ip_value).ok_or_else(|| {
            ftx.error(format!(
                "IP Address {s:?} parse error during conversion from string"
            ))
        }),
        // `<cidr>.ip()`: the CIDR's address.
        None => match &ftx.this {
            Some(c) => Ok(ip_value(cidr_of(ftx, c)?.0)),
            None => Err(ftx.error("ip() needs an address")),
        },
        Some(_) => Err(ftx.error("ip() takes a string")),
    }
}

fn is_canonical(ftx: &FunctionContext, This(ns): This<Value>, s: Arc<String>) -> Result<bool> {
    typed::receiver(ftx, &ns, IP_NAMESPACE)?;
    let ip = parse_ip(&s).ok_or_else(|| {
        ftx.error(format!(
            "IP Address {s:?} parse error during conversion from string"
        ))
    })?;
    Ok(ip.to_string() == *s)
}

fn family(ftx: &FunctionContext, This(v): This<Value>) -> Result<i64> {
    Ok(if ip_of(ftx, &v)?.is_ipv4() { 4 } else { 6 })
}

fn is_unspecified(ftx: &FunctionContext, This(v): This<Value>) -> Result<bool> {
    Ok(ip_of(ftx, &v)?.is_unspecified())
}

fn is_loopback(ftx: &FunctionContext, This(v): This<Value>) -> Result<bool> {
    Ok(ip_of(ftx, &v)?.is_loopback())
}

fn is_link_local_multicast(ftx: &FunctionContext, This(v): This<Value>) -> Result<bool> {
    Ok(match ip_of(ftx, &v)? {
        IpAddr::V4(a) => {
            let o = a.octets();
            o[0] == 224 && o[1] == 0 && o[2] == 0
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            o[0] == 0xff && o[1] & 0x0f == 0x02
        }
    })
}

fn link_local_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            o[0] == 169 && o[1] == 254
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            s[0] & 0xffc0 == 0xfe80
        }
    }
}

fn is_link_local_unicast(ftx: &FunctionContext, This(v): This<Value>) -> Result<bool> {
    Ok(link_local_unicast(ip_of(ftx, &v)?))
}

fn is_global_unicast(ftx: &FunctionContext, This(v): This<Value>) -> Result<bool> {
    let ip = ip_of(ftx, &v)?;
    let broadcast = matches!(ip, IpAddr::V4(a) if a.is_broadcast());
    Ok(!(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || link_local_unicast(ip)
        || broadcast))
}

fn cidr(ftx: &FunctionContext, s: Arc<String>) -> Result<Value> {
    parse_cidr(&s)
        .map(|(ip, len)| cidr_value(ip, len))
        .ok_or_else(|| {
            ftx.error(format!(
                "network address {s:?} parse error during conversion from string"
            ))
        })
}

fn contains_ip(ftx: &FunctionContext, This(c): This<Value>, other: Value) -> Result<bool> {
    let net = cidr_of(ftx, &c)?;
    let ip = match &other {
        Value::String(s) => parse_ip(s).ok_or_else(|| {
            ftx.error(format!(
                "IP Address {s:?} parse error during conversion from string"
            ))
        })?,
        v => ip_of(ftx, v)?,
    };
    Ok(contains(net, ip))
}

fn contains_cidr(ftx: &FunctionContext, This(c): This<Value>, other: Value) -> Result<bool> {
    let net = cidr_of(ftx, &c)?;
    let (ip, len) = match &other {
        Value::String(s) => parse_cidr(s).ok_or_else(|| {
            ftx.error(format!(
                "network address {s:?} parse error during conversion from string"
            ))
        })?,
        v => cidr_of(ftx, v)?,
    };
    Ok(len >= net.1 && contains(net, ip))
}

fn masked_cidr(ftx: &FunctionContext, This(c): This<Value>) -> Result<Value> {
    let (ip, len) = cidr_of(ftx, &c)?;
    Ok(cidr_value(masked(ip, len), len))
}

fn prefix_length(ftx: &FunctionContext, This(c): This<Value>) -> Result<i64> {
    Ok(i64::from(cidr_of(ftx, &c)?.1))
}

/// `string()`: an IP's or CIDR's text, else the standard conversion.
fn string(ftx: &FunctionContext, This(v): This<Value>) -> Result<Value> {
    for kind in [IP, CIDR] {
        if let Some(f) = typed::fields(&v, kind) {
            return Ok(typed::string(typed::text(f, "value")));
        }
    }
    cel::functions::string(ftx, This(v))
}

/// The `ip` variable (the receiver of `ip.isCanonical`).
pub(super) fn namespace() -> Value {
    typed::make(IP_NAMESPACE, Vec::new())
}

/// Adds the library to `ctx`.
pub(super) fn register(ctx: &mut Context<'static>) {
    ctx.add_function("ip", ip);
    ctx.add_function("isCanonical", is_canonical);
    ctx.add_function("family", family);
    ctx.add_function("isUnspecified", is_unspecified);
    ctx.add_function("isLoopback", is_loopback);
    ctx.add_function("isLinkLocalMulticast", is_link_local_multicast);
    ctx.add_function("isLinkLocalUnicast", is_link_local_unicast);
    ctx.add_function("isGlobalUnicast", is_global_unicast);
    ctx.add_function("cidr", cidr);
    ctx.add_function("containsIP", contains_ip);
    ctx.add_function("containsCIDR", contains_cidr);
    ctx.add_function("masked", masked_cidr);
    ctx.add_function("prefixLength", prefix_length);
    ctx.add_function("string", string);
    ctx.add_variable_from_value("ip", namespace());
}
