//! Where the scheduler keeps its configuration between changes. The service saves after
//! every successful admin change and loads at start; today's store is memory, and a
//! durable one (JetStream KV) plugs in behind the same trait.

use crate::core::{ClusterConfig, IntegralVolumes};

pub trait ConfigStore: Send {
    /// The saved configuration, or `None` for a fresh installation.
    fn load(&mut self) -> anyhow::Result<Option<ClusterConfig>>;
    fn save(&mut self, config: &ClusterConfig) -> anyhow::Result<()>;
    /// Integral volumes per tree and pool, saved every few seconds: a restart loses at
    /// most that much accrual.
    fn load_volumes(&mut self) -> anyhow::Result<IntegralVolumes>;
    fn save_volumes(&mut self, volumes: &IntegralVolumes) -> anyhow::Result<()>;
}

/// Keeps the configuration for the life of the process.
#[derive(Default)]
pub struct MemoryStore {
    saved: Option<ClusterConfig>,
    volumes: IntegralVolumes,
}

impl ConfigStore for MemoryStore {
    fn load(&mut self) -> anyhow::Result<Option<ClusterConfig>> {
        Ok(self.saved.clone())
    }

    fn save(&mut self, config: &ClusterConfig) -> anyhow::Result<()> {
        self.saved = Some(config.clone());
        Ok(())
    }

    fn load_volumes(&mut self) -> anyhow::Result<IntegralVolumes> {
        Ok(self.volumes.clone())
    }

    fn save_volumes(&mut self, volumes: &IntegralVolumes) -> anyhow::Result<()> {
        self.volumes = volumes.clone();
        Ok(())
    }
}
