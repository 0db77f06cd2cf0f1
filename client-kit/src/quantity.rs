//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`) as integers: cpu in millicores, everything
//! else in whole units, rounded up as upstream's `MilliValue` and `Value` round.

/// `s` in thousandths of a unit, rounded up (`100m` → 100, `2` → 2000); None if it does not parse.
pub fn milli(s: &str) -> Option<i64> {
    scaled(s, 3)
}

/// `s` in whole units, rounded up (`1Ki` → 1024, `500m` → 1); None if it does not parse.
pub fn value(s: &str) -> Option<i64> {
    scaled(s, 0)
}

/// The quantity times 10^`extra`, rounded up, as an i64 (saturating).
fn scaled(s: &str, extra: u32) -> Option<i64> {
    let (num, den) = rational(s, extra)?;
    let rounded = if num < 0 {
        num / den
    } else {
        (num + den - 1) / den
    };
    Some(i64::try_from(rounded).unwrap_or(if num < 0 { i64::MIN } else { i64::MAX }))
}

/// The quantity times 10^`extra` as a fraction `num / den` (`den` a power of ten).
fn rational(s: &str, extra: u32) -> Option<(i128, i128)> {
    let s = s.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    if number.is_empty() || number == "." {
        return None;
    }
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if frac_part.contains('.') || frac_part.len() > 30 || int_part.len() > 30 {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let mantissa: i128 = digits.parse().ok()?;
    // value = mantissa * 10^exp10 * 2^exp2
    let mut exp10: i32 = -i32::try_from(frac_part.len()).ok()? + i32::try_from(extra).ok()?;
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))?;
            let e: i32 = exp.parse().ok()?;
            if !(-40..=40).contains(&e) {
                return None;
            }
            exp10 += e;
        }
    }
    let mut num = mantissa.checked_mul(1i128.checked_shl(exp2)?)?;
    let mut den: i128 = 1;
    if exp10 >= 0 {
        for _ in 0..exp10 {
            num = num.checked_mul(10)?;
        }
    } else {
        for _ in 0..(-exp10) {
            den = den.checked_mul(10)?;
        }
    }
    Some((if negative { -num } else { num }, den))
}

/// The suffixes of binary multiples, by power of 1024.
const BINARY: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// A quantity held exactly, in billionths of a unit, with the notation it was written in: what quota
/// sums and differences need, printed as upstream prints them (`1536Mi`, `1500m`, `2k`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantity {
    nano: i128,
    binary: bool,
}

impl Quantity {
    /// Parses `s` (`100m`, `1.5Gi`, `2e3`); None if it does not parse. Below a billionth rounds up.
    pub fn parse(s: &str) -> Option<Self> {
        let (num, den) = rational(s, 9)?;
        let nano = if num < 0 {
            num / den
        } else {
            (num + den - 1) / den
        };
        let s = s.trim_end();
        let binary = BINARY[1..].iter().any(|b| s.ends_with(b));
        Some(Quantity { nano, binary })
    }

    /// A whole number of units (object counts).
    pub fn count(n: i64) -> Self {
        Quantity {
            nano: i128::from(n) * 1_000_000_000,
            binary: false,
        }
    }

    /// The sum, in this quantity's notation, or the other's when this one is zero (as upstream's `Add`).
    pub fn plus(self, other: Quantity) -> Self {
        Quantity {
            nano: self.nano.saturating_add(other.nano),
            binary: self.notation_with(other),
        }
    }

    /// The difference, in this quantity's notation, or the other's when this one is zero.
    pub fn minus(self, other: Quantity) -> Self {
        Quantity {
            nano: self.nano.saturating_sub(other.nano),
            binary: self.notation_with(other),
        }
    }

    fn notation_with(&self, other: Quantity) -> bool {
        if self.nano == 0 {
            other.binary
        } else {
            self.binary
        }
    }

    /// Whether it is zero.
    pub fn is_zero(&self) -> bool {
        self.nano == 0
    }

    /// Whether it is below zero.
    pub fn is_negative(&self) -> bool {
        self.nano < 0
    }

    /// Whether it is a whole number of units.
    pub fn is_whole(&self) -> bool {
        self.nano % 1_000_000_000 == 0
    }

    /// The value in thousandths of a unit, rounded up (upstream's `MilliValue`).
    pub fn milli(&self) -> i128 {
        let m = self.nano / 1_000_000;
        if self.nano > 0 && self.nano % 1_000_000 != 0 {
            m + 1
        } else {
            m
        }
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nano == other.nano
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.nano.cmp(&other.nano)
    }
}

impl std::fmt::Display for Quantity {
    /// Upstream's canonical form: binary suffixes for whole multiples of 1024 written in binary
    /// notation, otherwise the largest decimal suffix (`n` … `E`) that keeps the number whole.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNIT: i128 = 1_000_000_000;
        if self.binary && self.nano % UNIT == 0 && self.nano.abs() >= 1024 * UNIT {
            let mut n = self.nano / UNIT;
            let mut power = 0;
            while power + 1 < BINARY.len() && n % 1024 == 0 {
                n /= 1024;
                power += 1;
            }
            return write!(f, "{n}{}", BINARY[power]);
        }
        if self.nano == 0 {
            return f.write_str("0");
        }
        const DECIMAL: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
        let mut n = self.nano;
        let mut step = 0;
        while step + 1 < DECIMAL.len() && n % 1000 == 0 {
            n /= 1000;
            step += 1;
        }
        write!(f, "{n}{}", DECIMAL[step])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_in_millicores() {
        assert_eq!(milli("100m"), Some(100));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("0.5"), Some(500));
        assert_eq!(milli("1.0001"), Some(1001));
        assert_eq!(milli("250000u"), Some(250));
        assert_eq!(milli("1n"), Some(1));
        assert_eq!(milli("2e3"), Some(2_000_000));
    }

    #[test]
    fn memory_in_bytes() {
        assert_eq!(value("1Ki"), Some(1024));
        assert_eq!(value("32Gi"), Some(32 << 30));
        assert_eq!(value("1.5Gi"), Some(3 << 29));
        assert_eq!(value("128974848"), Some(128_974_848));
        assert_eq!(value("129e6"), Some(129_000_000));
        assert_eq!(value("123M"), Some(123_000_000));
        assert_eq!(value("500m"), Some(1));
        assert_eq!(value("110"), Some(110));
    }

    #[test]
    fn exact_sums_print_as_upstream() {
        let q = |s: &str| Quantity::parse(s).expect(s);
        assert_eq!(q("1Gi").plus(q("512Mi")).to_string(), "1536Mi");
        assert_eq!(q("500m").plus(q("1")).to_string(), "1500m");
        assert_eq!(q("1").plus(q("1")).to_string(), "2");
        assert_eq!(q("1500").to_string(), "1500");
        assert_eq!(q("2000").to_string(), "2k");
        assert_eq!(q("100Mi").minus(q("100Mi")).to_string(), "0");
        assert_eq!(q("512").plus(q("0")).to_string(), "512");
        assert_eq!(q("1Ki").plus(q("1")).to_string(), "1025");
        assert_eq!(q("0").plus(q("64Mi")).plus(q("64Mi")).to_string(), "128Mi");
        assert_eq!(q("1.5Gi").to_string(), "1536Mi");
        assert_eq!(q("0.5Ki").to_string(), "512");
        assert_eq!(Quantity::count(3).to_string(), "3");
        assert!(q("1Gi") > q("1G"));
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(q("1n").milli(), 1);
        assert!(q("-1").is_negative());
        assert!(!q("1.5").is_whole());
    }

    #[test]
    fn junk_does_not_parse() {
        assert_eq!(value(""), None);
        assert_eq!(value("abc"), None);
        assert_eq!(value("1Qi"), None);
        assert_eq!(value("1.2.3"), None);
    }
}
