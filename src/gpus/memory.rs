//! Device memory: how much each device has (`nvidia-smi --query-gpu`), and sizes written for
//! people (`16 GiB`); the crate hptune_memory_size reads them.

use std::process::Command;

use super::Device;
use super::detect::{NVIDIA_SMI_TIMEOUT, output_within};

/// Writes a number of bytes in the largest binary unit that holds it whole or to a tenth:
/// `16 GiB`, `4.5 GiB`, `512 MiB`.
pub(crate) fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, scale) in UNITS {
        if bytes >= scale {
            let value = bytes as f64 / scale as f64;
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
