//! Memory sizes as people write them, read the same way by hptune (a study's
//! `trial.resources.gpu_memory`) and by hptune-trainer (`--gpu-memory`, `HPTUNE_GPU_MEMORY`):
//! a whole number of bytes (`17179869184`), or a number with a unit, binary (`KiB`, `MiB`,
//! `GiB`, `TiB`) or decimal (`kB`, `MB`, `GB`, `TB`, and `B`), in any case and with or without
//! a space: `16GiB`, `1.5 GB`, `512mib`. A size is at least one byte.
//!
//! A crate of its own so that the trainer reads sizes as hptune does without depending on it.

#![warn(unreachable_pub)]

/// The units, each binary one before the decimal one that ends like it, lower case, and their
/// bytes.
const UNITS: [(&str, f64); 9] = [
    ("kib", 1024.0),
    ("mib", 1048576.0),
    ("gib", 1073741824.0),
    ("tib", 1099511627776.0),
    ("kb", 1e3),
    ("mb", 1e6),
    ("gb", 1e9),
    ("tb", 1e12),
    ("b", 1.0),
];

/// What is wrong with a memory size, and what would be right; each message quotes the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemorySizeError {
    /// Nothing, or only spaces.
    #[error("no memory size given: write a number with a unit (16GiB, 512MiB, 8GB) or bytes")]
    Empty,
    /// Not a number, or a unit this crate does not know.
    #[error(
        "'{0}' is not a memory size: write a number with a unit (16GiB, 512MiB, 8GB) or a whole number of bytes"
    )]
    NotASize(String),
    /// Bytes (no unit, or `B`) that are not whole.
    #[error(
        "'{0}' is a fraction of a byte: write a whole number of bytes, or a larger unit (1.5GiB)"
    )]
    FractionOfAByte(String),
    /// Zero, negative, or so small a part of its unit that it rounds to no byte.
    #[error("'{0}' is less than one byte: a memory size is at least 1B")]
    LessThanOneByte(String),
    /// More bytes than 64 bits count.
    #[error("'{0}' is too large: a memory size is less than 16EiB (2^64 bytes)")]
    TooLarge(String),
}

/// Reads a memory size (see the crate's documentation) into bytes; a fractional number of a
/// unit is rounded to the nearest byte (`1.5KiB` is 1536).
pub fn parse(text: &str) -> Result<u64, MemorySizeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(MemorySizeError::Empty);
    }
    let lower = text.to_ascii_lowercase();
    let (number, scale) = UNITS
        .iter()
        .find_map(|(unit, scale)| {
            lower
                .strip_suffix(unit)
                .map(|number| (number.trim_end(), *scale))
        })
        .unwrap_or((lower.as_str(), 1.0));
    let owned = || text.to_string();
    if scale == 1.0
        && let Ok(bytes) = number.parse::<u64>()
    {
        // Exact, also past the 2^53 bytes an f64 holds exactly.
        return if bytes == 0 {
            Err(MemorySizeError::LessThanOneByte(owned()))
        } else {
            Ok(bytes)
        };
    }
    let value: f64 = match number.parse() {
        Ok(value) if f64::is_finite(value) => value,
        _ => return Err(MemorySizeError::NotASize(owned())),
    };
    if value <= 0.0 {
        return Err(MemorySizeError::LessThanOneByte(owned()));
    }
    if scale == 1.0 && value.fract() != 0.0 {
        return Err(MemorySizeError::FractionOfAByte(owned()));
    }
    let bytes = (value * scale).round();
    if bytes < 1.0 {
        Err(MemorySizeError::LessThanOneByte(owned()))
    } else if bytes >= u64::MAX as f64 {
        Err(MemorySizeError::TooLarge(owned()))
    } else {
        Ok(bytes as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bytes_and_binary_and_decimal_units_in_any_case() {
        assert_eq!(parse("17179869184"), Ok(17179869184));
        assert_eq!(parse("16GiB"), Ok(16 << 30));
        assert_eq!(parse("16 gib"), Ok(16 << 30));
        assert_eq!(parse(" 512MiB "), Ok(512 << 20));
        assert_eq!(parse("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse("2TiB"), Ok(2 << 40));
        assert_eq!(parse("4KiB"), Ok(4096));
        assert_eq!(parse("8GB"), Ok(8_000_000_000));
        assert_eq!(parse("20gb"), Ok(20_000_000_000));
        assert_eq!(parse("64kB"), Ok(64_000));
        assert_eq!(parse("3MB"), Ok(3_000_000));
        assert_eq!(parse("1TB"), Ok(1_000_000_000_000));
        assert_eq!(parse("100B"), Ok(100));
        assert_eq!(parse("1.5KiB"), Ok(1536));
        assert_eq!(parse("1e3"), Ok(1000));
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn refuses_what_is_not_a_size_quoting_it_with_an_example() {
        for bad in [
            "lots", "16 gigs", "16XB", "GiB", "B", "nanGiB", "infGB", "1,5GiB", "GiB16",
        ] {
            assert_eq!(parse(bad), Err(MemorySizeError::NotASize(bad.into())));
        }
        let message = parse("16 gigs").unwrap_err().to_string();
        assert_eq!(
            message,
            "'16 gigs' is not a memory size: write a number with a unit (16GiB, 512MiB, 8GB) or a whole number of bytes"
        );
        assert_eq!(parse(""), Err(MemorySizeError::Empty));
        assert_eq!(parse("  "), Err(MemorySizeError::Empty));
    }

    #[test]
    fn refuses_no_memory_and_fractions_of_a_byte() {
        for none in ["0", "0GiB", "-1GiB", "-5", "0.0001KiB", "0B"] {
            assert_eq!(
                parse(none),
                Err(MemorySizeError::LessThanOneByte(none.into()))
            );
        }
        assert_eq!(
            parse("-1GiB").unwrap_err().to_string(),
            "'-1GiB' is less than one byte: a memory size is at least 1B"
        );
        for fraction in ["1.5", "0.5B", "100.25b"] {
            assert_eq!(
                parse(fraction),
                Err(MemorySizeError::FractionOfAByte(fraction.into()))
            );
        }
    }

    #[test]
    fn refuses_sizes_past_64_bits() {
        for huge in ["18446744073709551616", "16777216TiB", "1e30GB"] {
            assert_eq!(parse(huge), Err(MemorySizeError::TooLarge(huge.into())));
        }
    }
}
