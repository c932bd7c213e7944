//! Uploads in progress: each takes its chunks in order and hashes them as they come.
//!
//! The first upload of a digest streams its bytes into the object store under that
//! digest (the "writer"); any other upload of the same digest (a file already stored,
//! or one being written by someone else) is only hashed, so bytes nobody has proven to
//! match are never written over a stored file. A writer that ends short or with other
//! bytes than it claimed has its object deleted.

use bytes::Bytes;
use sha2::Digest as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;
use ytsched_common::files::Sha256Digest;
use ytsched_common::identity::UserName;

/// Chunks queued between the API and the object store's writer.
const CHUNKS_IN_FLIGHT: usize = 4;

/// The object store's write of one upload, fed chunk by chunk.
pub struct ObjectWrite {
    pub chunks: mpsc::Sender<Bytes>,
    pub done: tokio::task::JoinHandle<Result<(), String>>,
}

impl ObjectWrite {
    /// Starts writing `digest` to `store`, reading what `chunks` is sent until it is
    /// dropped.
    pub fn start(
        store: async_nats::jetstream::object_store::ObjectStore,
        digest: &Sha256Digest,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Bytes>(CHUNKS_IN_FLIGHT);
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
        });
        let name = digest.as_str().to_string();
        let done = tokio::spawn(async move {
            let mut reader = tokio_util::io::StreamReader::new(Box::pin(stream));
            store
                .put(name.as_str(), &mut reader)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        Self { chunks: tx, done }
    }
}

/// One upload as its user left it.
pub struct Upload {
    pub user: UserName,
    pub digest: Sha256Digest,
    pub size: u64,
    pub name: Option<String>,
    pub received: u64,
    pub hasher: sha2::Sha256,
    /// Set for the one upload of a digest that writes it.
    pub write: Option<ObjectWrite>,
    pub last_activity: Instant,
}

impl Upload {
    pub fn new(user: UserName, digest: Sha256Digest, size: u64, name: Option<String>) -> Self {
        Self {
            user,
            digest,
            size,
            name,
            received: 0,
            hasher: sha2::Sha256::new(),
            write: None,
            last_activity: Instant::now(),
        }
    }

    /// Takes the chunk at `offset`: the next one, and no more than the upload's size.
    pub async fn take(&mut self, offset: u64, data: Vec<u8>) -> Result<u64, String> {
        if offset != self.received {
            return Err(format!(
                "chunk at offset {offset}, but the upload has {} bytes: chunks go in order",
                self.received
            ));
        }
        let end = self.received + data.len() as u64;
        if end > self.size {
            return Err(format!(
                "chunk ends at byte {end}, past the {} bytes the upload began with",
                self.size
            ));
        }
        self.hasher.update(&data);
        if let Some(w) = &self.write {
            w.chunks
                .send(Bytes::from(data))
                .await
                .map_err(|_| "the file store stopped taking this upload".to_string())?;
        }
        self.received = end;
        self.last_activity = Instant::now();
        Ok(self.received)
    }
}

/// Uploads open, by id, and which digests one of them is writing.
#[derive(Default)]
pub struct Uploads {
    open: HashMap<String, Arc<tokio::sync::Mutex<Upload>>>,
    owners: HashMap<String, (UserName, Sha256Digest)>,
}

impl Uploads {
    pub fn count_of(&self, user: &UserName) -> usize {
        self.owners.values().filter(|(u, _)| u == user).count()
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    pub fn add(&mut self, id: String, upload: Upload) {
        self.owners
            .insert(id.clone(), (upload.user.clone(), upload.digest.clone()));
        self.open
            .insert(id, Arc::new(tokio::sync::Mutex::new(upload)));
    }

    /// The upload `id` if `user` began it: another user's id is as unknown as a made-up one.
    pub fn get(&self, id: &str, user: &UserName) -> Option<Arc<tokio::sync::Mutex<Upload>>> {
        match self.owners.get(id) {
            Some((u, _)) if u == user => self.open.get(id).cloned(),
            _ => None,
        }
    }

    pub fn remove(&mut self, id: &str) -> Option<Arc<tokio::sync::Mutex<Upload>>> {
        self.owners.remove(id);
        self.open.remove(id)
    }

    /// Ids of the uploads idle past `idle`, whose lock is free (one being served is not).
    pub fn idle(&self, idle: std::time::Duration) -> Vec<String> {
        self.open
            .iter()
            .filter(|(_, u)| u.try_lock().is_ok_and(|u| u.last_activity.elapsed() > idle))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Bytes `user`'s open uploads will add.
    pub fn pending_bytes(&self, user: &UserName) -> u64 {
        self.open
            .values()
            .filter_map(|u| u.try_lock().ok())
            .filter(|u| &u.user == user)
            .map(|u| u.size)
            .sum()
    }
}

/// Digests being written now.
#[derive(Default)]
pub struct Writing {
    digests: Mutex<std::collections::HashSet<Sha256Digest>>,
}

impl Writing {
    /// Claims `digest` for writing; false if another upload writes it.
    pub fn claim(&self, digest: &Sha256Digest) -> bool {
        self.digests
            .lock()
            .expect("writing lock")
            .insert(digest.clone())
    }

    pub fn release(&self, digest: &Sha256Digest) {
        self.digests.lock().expect("writing lock").remove(digest);
    }

    fn busy(&self, digest: &Sha256Digest) -> bool {
        self.digests.lock().expect("writing lock").contains(digest)
    }

    /// Waits (at most `limit`) until no upload writes `digest`.
    pub async fn wait_for(&self, digest: &Sha256Digest, limit: std::time::Duration) {
        let deadline = Instant::now() + limit;
        while self.busy(digest) && Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn chunks_come_in_order_and_never_past_the_size_begun_with() {
        let user = UserName::parse("alice").unwrap();
        let mut u = Upload::new(user.clone(), Sha256Digest::of(b"hello"), 5, None);
        assert!(u
            .take(1, b"ello".to_vec())
            .await
            .unwrap_err()
            .contains("in order"));
        assert_eq!(u.take(0, b"hel".to_vec()).await, Ok(3));
        assert!(u
            .take(3, b"lo!".to_vec())
            .await
            .unwrap_err()
            .contains("past the 5 bytes"));
        assert_eq!(u.take(3, b"lo".to_vec()).await, Ok(5));
        let got = Sha256Digest::from_hasher(std::mem::take(&mut u.hasher));
        assert_eq!(got, Sha256Digest::of(b"hello"));

        let mut open = Uploads::default();
        open.add(
            "id1".into(),
            Upload::new(user.clone(), Sha256Digest::of(b"x"), 7, None),
        );
        assert!(open.get("id1", &user).is_some());
        let mallory = UserName::parse("mallory").unwrap();
        assert!(
            open.get("id1", &mallory).is_none(),
            "another user's upload is unknown"
        );
        assert_eq!(open.pending_bytes(&user), 7);
        assert_eq!(open.count_of(&mallory), 0);
    }

    #[test]
    fn one_upload_writes_a_digest_at_a_time() {
        let w = Writing::default();
        let d = Sha256Digest::of(b"x");
        assert!(w.claim(&d));
        assert!(!w.claim(&d));
        w.release(&d);
        assert!(w.claim(&d));
    }
}
