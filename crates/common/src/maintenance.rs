//! Node maintenance (SPEC 5.13, YTsaurus's node attributes): what an admin has told the
//! scheduler about a machine it is servicing. Kept with the configuration, so it
//! survives restarts of the node and of the scheduler.

use serde::{Deserialize, Serialize};

/// The maintenance attributes of one node; all false is a node in service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMaintenance {
    /// No jobs at all: running ones are aborted and run again elsewhere.
    #[serde(default)]
    pub banned: bool,
    /// No new jobs; running ones finish (what `ytsched drain` sets).
    #[serde(default)]
    pub decommissioned: bool,
    /// No new scheduler jobs; running ones finish. Every ytsched job is a scheduler job,
    /// so this acts as `decommissioned` does; YTsaurus keeps the two apart for its
    /// master's own jobs.
    #[serde(default)]
    pub disable_scheduler_jobs: bool,
}

/// One of the attributes, as admin paths name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceFlag {
    Banned,
    Decommissioned,
    DisableSchedulerJobs,
}

impl MaintenanceFlag {
    pub const ALL: [MaintenanceFlag; 3] = [
        MaintenanceFlag::Banned,
        MaintenanceFlag::Decommissioned,
        MaintenanceFlag::DisableSchedulerJobs,
    ];

    pub fn parse(attribute: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == attribute)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Banned => "banned",
            Self::Decommissioned => "decommissioned",
            Self::DisableSchedulerJobs => "disable_scheduler_jobs",
        }
    }
}

impl NodeMaintenance {
    pub fn is_in_service(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the scheduler may start a job there.
    pub fn accepts_new_jobs(&self) -> bool {
        self.is_in_service()
    }

    pub fn get(&self, flag: MaintenanceFlag) -> bool {
        match flag {
            MaintenanceFlag::Banned => self.banned,
            MaintenanceFlag::Decommissioned => self.decommissioned,
            MaintenanceFlag::DisableSchedulerJobs => self.disable_scheduler_jobs,
        }
    }

    pub fn set(&mut self, flag: MaintenanceFlag, on: bool) {
        match flag {
            MaintenanceFlag::Banned => self.banned = on,
            MaintenanceFlag::Decommissioned => self.decommissioned = on,
            MaintenanceFlag::DisableSchedulerJobs => self.disable_scheduler_jobs = on,
        }
    }

    /// The attributes set, by name, for tables (`-` when in service).
    pub fn summary(&self) -> String {
        let set: Vec<&str> = MaintenanceFlag::ALL
            .into_iter()
            .filter(|f| self.get(*f))
            .map(MaintenanceFlag::name)
            .collect();
        if set.is_empty() {
            "-".to_string()
        } else {
            set.join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_by_name_and_any_one_stops_new_jobs() {
        for f in MaintenanceFlag::ALL {
            assert_eq!(MaintenanceFlag::parse(f.name()), Some(f));
            let mut m = NodeMaintenance::default();
            assert!(m.accepts_new_jobs());
            m.set(f, true);
            assert!(m.get(f) && !m.accepts_new_jobs());
            assert_eq!(m.summary(), f.name());
        }
        assert_eq!(MaintenanceFlag::parse("user_tags"), None);
        assert_eq!(NodeMaintenance::default().summary(), "-");
    }
}
