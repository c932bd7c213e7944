//! NVIDIA GPU discovery: NVML loaded at run time (never linked), falling back to
//! `nvidia-smi`. No driver means no GPUs, not an error.

use std::path::Path;
use std::process::Command;

#[derive(Clone, Debug, PartialEq)]
pub struct GpuDevice {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_mib: u64,
}

/// Finds GPUs through NVML, then through `nvidia_smi` (a path, or the name looked up
/// on PATH). Returns the devices and how they were found, for the log.
pub fn detect(nvidia_smi: &Path) -> (Vec<GpuDevice>, &'static str) {
    if let Some(devices) = from_nvml() {
        return (devices, "nvml");
    }
    match from_nvidia_smi(nvidia_smi) {
        Some(devices) => (devices, "nvidia-smi"),
        None => (vec![], "none"),
    }
}

fn from_nvml() -> Option<Vec<GpuDevice>> {
    let nvml = nvml_wrapper::Nvml::init().ok()?;
    let count = nvml.device_count().ok()?;
    let mut out = Vec::new();
    for i in 0..count {
        let d = nvml.device_by_index(i).ok()?;
        out.push(GpuDevice {
            index: i,
            uuid: d.uuid().unwrap_or_default(),
            name: d.name().unwrap_or_else(|_| "unknown".into()),
            memory_mib: d.memory_info().map(|m| m.total >> 20).unwrap_or(0),
        });
    }
    Some(out)
}

fn from_nvidia_smi(program: &Path) -> Option<Vec<GpuDevice>> {
    let output = Command::new(program)
        .args([
            "--query-gpu=index,uuid,name,memory.total",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    Some(parse_nvidia_smi(&String::from_utf8_lossy(&output.stdout)))
}

/// Parses lines like `0, GPU-<uuid>, NVIDIA H100 80GB HBM3, 81559`; bad lines are skipped.
pub fn parse_nvidia_smi(text: &str) -> Vec<GpuDevice> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if fields.len() < 4 {
                return None;
            }
            Some(GpuDevice {
                index: fields[0].parse().ok()?,
                uuid: fields[1].to_string(),
                name: fields[2].to_string(),
                memory_mib: fields[3].parse().unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvidia_smi_csv() {
        let d = parse_nvidia_smi(
            "0, GPU-aaa, NVIDIA H100 80GB HBM3, 81559\n1, GPU-bbb, NVIDIA H100 80GB HBM3, 81559\ngarbage\n",
        );
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].index, 1);
        assert_eq!(d[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(d[0].memory_mib, 81559);
    }

    #[test]
    fn missing_driver_means_no_gpus() {
        let (d, how) = detect(Path::new("/nonexistent/nvidia-smi"));
        // NVML is not present on test machines without a driver.
        if how != "nvml" {
            assert!(d.is_empty());
            assert_eq!(how, "none");
        }
    }
}
