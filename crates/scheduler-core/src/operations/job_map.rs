//! An operation's live job attempts, by id. Most operations run one job or a few, and a
//! B-tree map's first leaf has room for eleven (about 280 bytes for a single job); a
//! vector kept in id order holds only what runs, and a lookup is the same binary search.
//! Finished attempts leave it (their states are compacted), so it stays as long as what
//! runs, and inserting in the middle moves that many pointers at most.

use super::job::Job;
use std::ops::Index;
use ytsched_common::JobId;

#[derive(Clone, Debug, Default)]
pub struct JobMap {
    /// In id order; only `insert` adds, so each id is there once.
    #[expect(
        clippy::vec_box,
        reason = "an insert in the middle moves pointers, not 320-byte attempts"
    )]
    jobs: Vec<Box<Job>>,
}

impl JobMap {
    fn find(&self, id: &JobId) -> Result<usize, usize> {
        self.jobs.binary_search_by(|j| j.id.cmp(id))
    }

    pub fn get(&self, id: &JobId) -> Option<&Job> {
        self.find(id).ok().map(|i| &*self.jobs[i])
    }

    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let i = self.find(id).ok()?;
        Some(&mut *self.jobs[i])
    }

    pub fn contains_key(&self, id: &JobId) -> bool {
        self.find(id).is_ok()
    }

    /// Holds `job` under its id, returning the attempt it replaces.
    pub fn insert(&mut self, job: Box<Job>) -> Option<Box<Job>> {
        match self.find(&job.id) {
            Ok(i) => Some(std::mem::replace(&mut self.jobs[i], job)),
            Err(i) => {
                self.jobs.insert(i, job);
                None
            }
        }
    }

    pub fn remove(&mut self, id: &JobId) -> Option<Box<Job>> {
        let i = self.find(id).ok()?;
        let job = self.jobs.remove(i);
        // An operation whose many jobs ended does not keep room for them all.
        if self.jobs.capacity() > 4 * self.jobs.len().max(1) {
            self.jobs.shrink_to(2 * self.jobs.len());
        }
        Some(job)
    }

    pub fn clear(&mut self) {
        self.jobs = Vec::new();
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// In id order, as every walk over them is.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Job> + Clone {
        self.jobs.iter().map(|j| &**j)
    }

    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut Job> {
        self.jobs.iter_mut().map(|j| &mut **j)
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &JobId> + Clone {
        self.jobs.iter().map(|j| &j.id)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&JobId, &Job)> + Clone {
        self.jobs.iter().map(|j| (&j.id, &**j))
    }
}

impl Index<&JobId> for JobMap {
    type Output = Job;
    fn index(&self, id: &JobId) -> &Job {
        self.get(id).expect("no job attempt with this id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use ytsched_common::names::TreeName;
    use ytsched_common::states::JobState;
    use ytsched_common::{NodeId, OperationId};

    fn job(seq: u64, index: u32) -> Box<Job> {
        Box::new(Job {
            id: JobId::attempt(&OperationId("op".into()), seq),
            task: 0,
            index,
            state: JobState::Running,
            node: NodeId("n".into()),
            tree: TreeName::parse("default").unwrap(),
            resources: Default::default(),
            start_time: 0,
            seq,
            finish_time: None,
            error: None,
            abort_reason: None,
            statistics: None,
            copy: None,
            speculative: false,
            interrupting: None,
            preparing: false,
        })
    }

    /// Ids whose text order is not their number's ("op-10" before "op-2"), added,
    /// replaced and removed in a scrambled order: the map answers as a B-tree map does.
    #[test]
    fn answers_as_an_ordered_map_of_the_same_attempts() {
        let (mut map, mut model) = (JobMap::default(), BTreeMap::new());
        for step in 0..600u64 {
            let seq = (step * 37) % 101;
            if step % 3 == 2 {
                let id = job(seq, 0).id;
                assert_eq!(map.remove(&id).map(|j| j.seq), model.remove(&id));
            } else {
                let j = job(seq, step as u32);
                let old = model.insert(j.id.clone(), seq);
                assert_eq!(map.insert(j).map(|j| j.seq), old);
            }
            assert_eq!(map.len(), model.len());
        }
        let keys: Vec<&JobId> = map.keys().collect();
        assert_eq!(keys, model.keys().collect::<Vec<_>>());
        for (id, seq) in &model {
            assert_eq!(map[id].seq, *seq);
            assert!(map.contains_key(id));
        }
        assert!(map.get(&job(1000, 0).id).is_none());
    }

    /// Room for many ended jobs is given back.
    #[test]
    fn gives_back_room_as_jobs_end() {
        let mut map = JobMap::default();
        for seq in 0..1000 {
            map.insert(job(seq, 0));
        }
        for seq in 0..999 {
            map.remove(&job(seq, 0).id);
        }
        assert_eq!(map.len(), 1);
        assert!(map.jobs.capacity() <= 4, "{}", map.jobs.capacity());
    }
}
