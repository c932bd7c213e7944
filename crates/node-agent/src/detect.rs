//! What this node offers: cpu, memory, gpu and user slots, each detected (cgroup-aware)
//! and each overridable by a flag so several agents on one machine can form a lab.

use ytsched_common::resources::ResourceVector;

pub struct Overrides {
    pub cpu: Option<f64>,
    pub memory: Option<u64>,
    pub gpu: Option<u32>,
    pub user_slots: Option<u32>,
    pub memory_reserve: Option<u64>,
}

/// `available_parallelism` honours the agent's cgroup cpu quota, unlike a raw CPU count.
pub fn detected_cpu() -> f64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0)
}

/// Physical memory, or the agent's cgroup memory limit if lower.
pub fn detected_memory() -> u64 {
    let Ok(mut sys) = sysinfo::System::new() else {
        return 0;
    };
    sys.refresh_memory();
    let total = sys.total_memory();
    match sys.cgroup_limits() {
        Some(l) if l.total_memory > 0 => total.min(l.total_memory),
        _ => total,
    }
}

/// Default reserve: 1 GiB or 10 %, whichever is smaller.
pub fn default_memory_reserve(total: u64) -> u64 {
    (1u64 << 30).min(total / 10)
}

pub fn resource_limits(o: &Overrides, gpu_count: u32) -> ResourceVector {
    let cpu = o.cpu.unwrap_or_else(detected_cpu);
    let memory = o.memory.unwrap_or_else(|| {
        let total = detected_memory();
        let reserve = o
            .memory_reserve
            .unwrap_or_else(|| default_memory_reserve(total));
        total.saturating_sub(reserve)
    });
    let gpu = o.gpu.unwrap_or(gpu_count);
    let user_slots = o
        .user_slots
        .unwrap_or_else(|| ((2.0 * cpu).floor() as u32).max(1));
    ResourceVector::new(cpu, memory as f64, gpu as f64, user_slots as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_and_slots_default_to_twice_cpu() {
        let o = Overrides {
            cpu: Some(4.0),
            memory: Some(8 << 30),
            gpu: None,
            user_slots: None,
            memory_reserve: None,
        };
        let r = resource_limits(&o, 2);
        assert_eq!(r, ResourceVector::new(4.0, (8u64 << 30) as f64, 2.0, 8.0));
        let o = Overrides {
            cpu: Some(0.2),
            ..o
        };
        assert_eq!(resource_limits(&o, 0).user_slots, 1.0);
    }

    #[test]
    fn detection_reserves_memory() {
        assert_eq!(default_memory_reserve(4 << 30), (4u64 << 30) / 10);
        assert_eq!(default_memory_reserve(64 << 30), 1 << 30);
        let o = Overrides {
            cpu: None,
            memory: None,
            gpu: Some(0),
            user_slots: None,
            memory_reserve: None,
        };
        let r = resource_limits(&o, 0);
        assert!(r.cpu >= 1.0 && r.memory > 0.0 && r.user_slots >= 1.0);
        assert!(r.memory < detected_memory() as f64);
    }
}
