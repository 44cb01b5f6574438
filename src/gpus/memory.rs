//! Device memory: how much each device has (`nvidia-smi --query-gpu`), and memory sizes as a
//! study file writes them (`16GiB`).

use std::process::Command;

use super::Device;
use super::detect::{NVIDIA_SMI_TIMEOUT, output_within};

/// The units of a memory size, largest first, and their bytes.
const UNITS: [(&str, u64); 9] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("kB", 1_000),
    ("B", 1),
];

/// Reads a memory size: a whole number of bytes, or a number with a unit (`16GiB`, `1.5GB`,
/// `512MiB`; binary `KiB`..`TiB`, decimal `kB`..`TB`). An error says what is wrong.
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, scale) = UNITS
        .iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n.trim(), *scale)))
        .unwrap_or((text, 1));
    let bad = || {
        format!(
            "'{text}' is not a memory size: write a number with a unit, e.g. 16GiB, 512MiB or 8GB"
        )
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{text} must be at least one byte"));
    }
    Ok(bytes.round() as u64)
}

/// Writes a number of bytes in the largest binary unit that holds it whole or to a tenth:
/// `16 GiB`, `4.5 GiB`, `512 MiB`.
pub(crate) fn format_bytes(bytes: u64) -> String {
    for (unit, scale) in UNITS.iter().filter(|(unit, _)| unit.ends_with("iB")) {
        if bytes >= *scale {
            let value = bytes as f64 / *scale as f64;
            let rounded = (value * 10.0).round() / 10.0;
            return format!("{rounded} {unit}");
        }
    }
    format!("{bytes} B")
}

/// Fills in the memory of `devices` as `nvidia-smi --query-gpu` reports it, matching each by
/// UUID, else by index; a device it does not list (or an `nvidia-smi` that fails or is not
/// there) keeps its memory unknown. Returns why nothing was learnt, if so.
pub(crate) fn device_memory(devices: &mut [Device]) -> Result<(), String> {
    let mut query = Command::new("nvidia-smi");
    query.args([
        "--query-gpu=index,uuid,memory.total",
        "--format=csv,noheader,nounits",
    ]);
    let out = output_within(&mut query, NVIDIA_SMI_TIMEOUT)
        .map_err(|e| format!("nvidia-smi --query-gpu {e}"))?;
    if !out.status.success() {
        return Err(format!("nvidia-smi --query-gpu failed ({})", out.status));
    }
    let listed = parse_query(&String::from_utf8_lossy(&out.stdout));
    for device in devices.iter_mut() {
        device.memory = listed
            .iter()
            .find(|(index, uuid, _)| {
                device.uuid.as_deref() == Some(uuid.as_str())
                    || (device.uuid.is_none() && device.name == *index)
            })
            .map(|(_, _, bytes)| *bytes);
    }
    Ok(())
}

/// Reads `index, uuid, memory.total` lines (the memory in MiB) into (index, UUID, bytes).
fn parse_query(output: &str) -> Vec<(String, String, u64)> {
    output
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(',').map(str::trim);
            let index = fields.next()?.to_string();
            let uuid = fields.next()?.to_string();
            let mib: u64 = fields.next()?.parse().ok()?;
            Some((index, uuid, mib << 20))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_memory_sizes_in_binary_and_decimal_units() {
        assert_eq!(parse_bytes("16GiB"), Ok(16 << 30));
        assert_eq!(parse_bytes("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("8GB"), Ok(8_000_000_000));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(
            parse_bytes("16 gigs")
                .unwrap_err()
                .contains("not a memory size")
        );
        assert!(
            parse_bytes("0GiB")
                .unwrap_err()
                .contains("at least one byte")
        );
        assert!(
            parse_bytes("-1GiB")
                .unwrap_err()
                .contains("at least one byte")
        );
    }

    #[test]
    fn writes_bytes_in_the_largest_binary_unit() {
        assert_eq!(format_bytes(16 << 30), "16 GiB");
        assert_eq!(format_bytes(9 << 29), "4.5 GiB");
        assert_eq!(format_bytes(512 << 20), "512 MiB");
        assert_eq!(format_bytes(12), "12 B");
    }

    #[test]
    fn reads_each_devices_memory_from_the_query() {
        let listed = parse_query("0, GPU-aa, 81559\n1, GPU-bb, 40960\nnot a line\n");
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1], ("1".into(), "GPU-bb".into(), 40960 << 20));
    }
}
