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
    let rounded = if negative {
        -(num / den)
    } else {
        (num + den - 1) / den
    };
    Some(i64::try_from(rounded).unwrap_or(if negative { i64::MIN } else { i64::MAX }))
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
    fn junk_does_not_parse() {
        assert_eq!(value(""), None);
        assert_eq!(value("abc"), None);
        assert_eq!(value("1Qi"), None);
        assert_eq!(value("1.2.3"), None);
    }
}
