//! The catalog: this gateway's cached view of the worker registry, and the discovery documents
//! built from it, so that a request neither reads nor parses the registry.
//!
//! A snapshot is the merged listing ([`crate::core::prices::merge::merge`]) tagged with the
//! [`RegistryVersion`] read just before it was listed. A request whose snapshot was confirmed
//! less than `max_age` ago (`--registry-refresh-ms` for discovery; for admission the smaller of
//! that and the entrypoint grace) is served from memory. Otherwise one request reads the
//! version (one cheap script, no listing) and lists again only when the version moved;
//! requests arriving meanwhile wait for that check and share its outcome, including its
//! failure, so an unreachable Redis costs one timeout, not one per queued request.
//!
//! Staleness bound: a response reflects the registry as it was at most `max_age` (plus one
//! Redis round trip) before the request arrived. It holds for dead workers too: an entry that
//! expires moves the version by itself (see `shared/store/lua/registry_version.lua`). Checks are
//! driven by requests, not by a timer: an idle gateway reads nothing, and a check never serves
//! a snapshot older than the bound.
//!
//! Documents (the card, `/entrypoints`, the OpenAPI document, the landing page) are kept per
//! snapshot listing and request origin, with their ETag, and are reused as long as the merged
//! entrypoints are equal: a worker joining with what others already host changes no byte.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use store::StoreError;
use store::registry::{EntrypointInfo, RegistryVersion, WorkerRegistry};

use crate::core::config::GatewayConfig;
use crate::core::recent::RecentEntrypoints;
pub use crate::http::document::Built;

/// Documents kept per listing. Origins come from request headers, so a client could mint them;
/// past this many, documents are built per request rather than cached.
const MAX_DOCUMENTS: usize = 64;

/// Extended cards kept per listing (one per member and origin; see
/// [`Snapshot::member_document`]); past this many they are built (and signed) per request.
const MAX_MEMBER_DOCUMENTS: usize = 256;

/// A listing is taken again this often even when the version has not moved: a safety net for
/// a registry written by workers that predate the version (their heartbeats move nothing).
const RELIST_EVERY: Duration = Duration::from_secs(30);

pub struct Catalog {
    refresh: Duration,
    /// The registry is in this process (embedded mode): its version is read on every request,
    /// which costs a lock, not a round trip, so nothing is ever stale.
    local: bool,
    recent: RecentEntrypoints,
    /// Some worker was listed since this gateway started: until then an empty registry means
    /// the cluster's workers have not registered (yet, or again after a Redis failover), not
    /// that a skill does not exist.
    listed_any: std::sync::atomic::AtomicBool,
    current: RwLock<Current>,
    /// Held by the one request that checks the registry; the others wait for its outcome.
    checking: tokio::sync::Mutex<()>,
}

#[derive(Clone, Default)]
struct Current {
    snapshot: Option<Arc<Snapshot>>,
    /// When the last check that confirmed `snapshot` started.
    checked: Option<Instant>,
    /// The last check that failed: when it started, and its error.
    failed: Option<(Instant, Arc<StoreError>)>,
}

/// The registry as of one check.
pub struct Snapshot {
    version: RegistryVersion,
    /// When the listing was read.
    listed: Instant,
    entries: Arc<Entries>,
}

/// One merged listing and the documents built from it.
struct Entries {
    entrypoints: Vec<EntrypointInfo>,
    /// The ones that are not private: all the public documents are built from.
    public: Vec<EntrypointInfo>,
    /// By document, then origin (a nested map, so a lookup borrows the origin).
    documents: RwLock<HashMap<Document, HashMap<String, Arc<Built>>>>,
    /// The extended cards, by member, then origin.
    member_documents: RwLock<HashMap<String, HashMap<String, Arc<Built>>>>,
}

/// Which discovery document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Document {
    Card,
    /// The strict A2A v1.0 card of the `/a2a` bindings.
    A2aCard,
    Entrypoints,
    OpenApi,
    Landing,
}

impl Catalog {
    /// `refresh`: the staleness bound of discovery; `grace`: how long an entrypoint that left
    /// the registry is still admitted (see [`crate::core::recent`]).
    pub fn new(refresh: Duration, grace: Duration) -> Self {
        Catalog {
            refresh,
            local: false,
            recent: RecentEntrypoints::new(grace),
            listed_any: std::sync::atomic::AtomicBool::new(false),
            current: RwLock::new(Current::default()),
            checking: tokio::sync::Mutex::new(()),
        }
    }

    /// With `--registry-refresh-ms` and `--entrypoint-grace-ms`.
    pub fn from_config(config: &GatewayConfig) -> Self {
        Catalog::new(
            Duration::from_millis(config.registry_refresh_ms),
            Duration::from_millis(config.entrypoint_grace_ms),
        )
    }

    /// For a registry in this process (embedded mode): the version is read on every request.
    pub fn local(grace: Duration) -> Self {
        Catalog {
            local: true,
            ..Catalog::new(Duration::ZERO, grace)
        }
    }

    /// True once the registry listed some worker since this gateway started.
    pub fn listed_any(&self) -> bool {
        self.listed_any.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The snapshot for discovery: at most the refresh interval old.
    pub async fn snapshot(
        &self,
        registry: &dyn WorkerRegistry,
    ) -> Result<Arc<Snapshot>, StoreError> {
        self.within(registry, self.refresh, false).await
    }

    /// The entrypoint `key` for admission: in a snapshot at most the refresh interval and at
    /// most the grace period old (so a cached listing never admits longer than the grace
    /// allows), or else as recalled within the grace period.
    pub async fn entrypoint(
        &self,
        registry: &dyn WorkerRegistry,
        key: &str,
    ) -> Result<Option<EntrypointInfo>, StoreError> {
        let max_age = self.refresh.min(self.recent.grace());
        let snapshot = self.within(registry, max_age, true).await?;
        let found = snapshot
            .entrypoints()
            .iter()
            .find(|entrypoint| entrypoint.key == key)
            .cloned();
        Ok(found.or_else(|| self.recent.recall(key)))
    }

    fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A snapshot confirmed less than `max_age` ago, checking the registry if there is none.
    /// `admitting`: the caller admits a task, so a local check also counts as a listing for
    /// the grace period (a remote check always does).
    async fn within(
        &self,
        registry: &dyn WorkerRegistry,
        max_age: Duration,
        admitting: bool,
    ) -> Result<Arc<Snapshot>, StoreError> {
        let arrived = Instant::now();
        if self.local {
            return self.check_local(registry, arrived, admitting).await;
        }
        if let Some(snapshot) = self.fresh(max_age, arrived) {
            return Ok(snapshot);
        }
        let _turn = self.checking.lock().await;
        // A check that started after this request arrived answers for it.
        let current = self.current();
        if let (Some(snapshot), Some(checked)) = (&current.snapshot, current.checked)
            && (checked >= arrived || arrived.saturating_duration_since(checked) < max_age)
        {
            return Ok(snapshot.clone());
        }
        if let Some((failed, err)) = &current.failed
            && *failed >= arrived
        {
            return Err(again(err));
        }
        self.check(registry, current.snapshot).await
    }

    /// The local registry's version against the snapshot's; no lock held across the read, as
    /// it does not wait on anything.
    async fn check_local(
        &self,
        registry: &dyn WorkerRegistry,
        arrived: Instant,
        admitting: bool,
    ) -> Result<Arc<Snapshot>, StoreError> {
        let version = registry.version().await?;
        let previous = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .snapshot
            .clone();
        match previous {
            Some(snapshot) if snapshot.version == version => {
                if admitting {
                    self.recent.remember(snapshot.entrypoints(), arrived);
                }
                Ok(snapshot)
            }
            previous => self.check(registry, previous).await,
        }
    }

    fn fresh(&self, max_age: Duration, now: Instant) -> Option<Arc<Snapshot>> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        let checked = current.checked?;
        if now.saturating_duration_since(checked) < max_age {
            current.snapshot.clone()
        } else {
            None
        }
    }

    /// Reads the version, lists again if it moved, and records the outcome.
    async fn check(
        &self,
        registry: &dyn WorkerRegistry,
        previous: Option<Arc<Snapshot>>,
    ) -> Result<Arc<Snapshot>, StoreError> {
        let started = Instant::now();
        let outcome = self.confirm_or_list(registry, previous, started).await;
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        match &outcome {
            Ok(snapshot) => {
                current.snapshot = Some(snapshot.clone());
                current.checked = Some(started);
                current.failed = None;
            }
            Err(err) => current.failed = Some((started, Arc::new(again(err)))),
        }
        drop(current);
        if let Ok(snapshot) = &outcome {
            // Listed live as of `started` at the earliest: the grace counts from there.
            self.recent.remember(snapshot.entrypoints(), started);
            if !snapshot.entrypoints().is_empty() {
                self.listed_any
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        outcome
    }

    async fn confirm_or_list(
        &self,
        registry: &dyn WorkerRegistry,
        previous: Option<Arc<Snapshot>>,
        started: Instant,
    ) -> Result<Arc<Snapshot>, StoreError> {
        // The version first: a listing read after it is at least that new.
        let version = registry.version().await?;
        if let Some(previous) = &previous
            && previous.version == version
            && started.duration_since(previous.listed) < RELIST_EVERY
        {
            return Ok(previous.clone());
        }
        let workers = registry.workers().await?;
        // With the listing, not per request: a pause or resume moves the version.
        let paused = registry.paused().await?;
        let mut merged = crate::core::prices::merge(&workers);
        crate::core::prices::warn(&merged.disagreements);
        for entrypoint in &mut merged.entrypoints {
            entrypoint.paused = paused.get(&entrypoint.key).cloned();
        }
        let entries = match previous {
            // Same entrypoints (a worker joined with what others host): same documents.
            Some(previous) if previous.entries.entrypoints == merged.entrypoints => {
                previous.entries.clone()
            }
            _ => Arc::new(Entries::new(merged.entrypoints)),
        };
        Ok(Arc::new(Snapshot {
            version,
            listed: started,
            entries,
        }))
    }
}

impl Entries {
    fn new(entrypoints: Vec<EntrypointInfo>) -> Self {
        let public = entrypoints
            .iter()
            .filter(|entrypoint| !entrypoint.private)
            .cloned()
            .collect();
        Entries {
            entrypoints,
            public,
            documents: RwLock::default(),
            member_documents: RwLock::default(),
        }
    }
}

/// The same failure for another waiting request (StoreError is not Clone).
fn again(err: &StoreError) -> StoreError {
    match err {
        StoreError::Corrupt(reason) => StoreError::Corrupt(reason.clone()),
        StoreError::Unavailable(reason) => StoreError::Unavailable(reason.clone()),
        other => StoreError::Unavailable(other.to_string()),
    }
}

impl Snapshot {
    /// Every entrypoint the live workers host, merged by key, private ones included.
    pub fn entrypoints(&self) -> &[EntrypointInfo] {
        &self.entries.entrypoints
    }

    /// The entrypoints `viewer` may see: the public ones, and for a member the private ones
    /// too.
    pub fn visible<'a>(
        &'a self,
        viewer: crate::core::members::Viewer<'a>,
    ) -> impl Iterator<Item = &'a EntrypointInfo> + 'a {
        self.entries
            .entrypoints
            .iter()
            .filter(move |entrypoint| viewer.sees(entrypoint))
    }

    /// Document `which` as seen from `origin`, built by `build` from the public entrypoints
    /// (never a private one: every document kept here is public) the first time it is asked
    /// for.
    pub fn document<E>(
        &self,
        which: Document,
        origin: &str,
        build: impl FnOnce(&[EntrypointInfo]) -> Result<Vec<u8>, E>,
    ) -> Result<Arc<Built>, E> {
        let documents = &self.entries.documents;
        if let Some(built) = documents
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&which)
            .and_then(|by_origin| by_origin.get(origin))
        {
            return Ok(built.clone());
        }
        let built = Arc::new(Built::new(build(&self.entries.public)?));
        let mut documents = documents.write().unwrap_or_else(PoisonError::into_inner);
        if documents.values().map(HashMap::len).sum::<usize>() < MAX_DOCUMENTS {
            documents
                .entry(which)
                .or_default()
                .insert(origin.to_owned(), built.clone());
        }
        Ok(built)
    }
}

impl Snapshot {
    /// The extended card of `member` as seen from `origin`, built by `build` from every
    /// entrypoint, private ones included, the first time it is asked for. Kept apart from the
    /// public documents, so that members never crowd those out of the cache.
    pub fn member_document<E>(
        &self,
        member: &str,
        origin: &str,
        build: impl FnOnce(&[EntrypointInfo]) -> Result<Vec<u8>, E>,
    ) -> Result<Arc<Built>, E> {
        let documents = &self.entries.member_documents;
        if let Some(built) = documents
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(member)
            .and_then(|by_origin| by_origin.get(origin))
        {
            return Ok(built.clone());
        }
        let built = Arc::new(Built::new(build(self.entrypoints())?));
        let mut documents = documents.write().unwrap_or_else(PoisonError::into_inner);
        if documents.values().map(HashMap::len).sum::<usize>() < MAX_MEMBER_DOCUMENTS {
            documents
                .entry(member.to_owned())
                .or_default()
                .insert(origin.to_owned(), built.clone());
        }
        Ok(built)
    }
}

/// A schema worth publishing: not the accept-anything `{}` / `true` / `null`.
pub fn published_schema(value: &serde_json::Value) -> Option<&serde_json::Value> {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(true) => None,
        Value::Object(map) if map.is_empty() => None,
        _ => Some(value),
    }
}

/// Whether an entrypoint's input schema accepts any JSON (`{}`, `true`, `null`): the cards
/// then publish none, and A2A takes any media type for it.
pub fn accepts_anything(schema: &serde_json::Value) -> bool {
    published_schema(schema).is_none()
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::convert::Infallible;

    use serde_json::json;
    use store::registry::{MemoryRegistry, WorkerEntry};

    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    fn worker(id: &str, keys: &[&str]) -> WorkerEntry {
        WorkerEntry {
            worker_id: id.to_owned(),
            host: "test".into(),
            started_at_ms: 0,
            concurrency: 1,
            entrypoints: keys
                .iter()
                .map(|key| EntrypointInfo {
                    key: (*key).to_owned(),
                    description: (*key).to_owned(),
                    input_schema: json!({}),
                    output_schema: json!({}),
                    streaming: false,
                    price: None,
                    retry_safe: false,
                    siwx: None,
                    private: false,
                    paused: None,
                })
                .collect(),
        }
    }

    /// The card of `catalog` as `origin` sees it, counting builds in `builds`.
    async fn card(
        catalog: &Catalog,
        registry: &MemoryRegistry,
        builds: &Cell<u32>,
    ) -> Result<Arc<Built>, StoreError> {
        let snapshot = catalog.snapshot(registry).await?;
        let built = snapshot.document(Document::Card, "http://a", |entrypoints| {
            builds.set(builds.get() + 1);
            let keys: Vec<&str> = entrypoints.iter().map(|e| e.key.as_str()).collect();
            Ok::<_, Infallible>(keys.join(",").into_bytes())
        });
        Ok(built.unwrap_or_else(|never| match never {}))
    }

    #[tokio::test]
    async fn documents_are_rebuilt_only_when_the_entrypoints_change() -> Result<(), StoreError> {
        // A zero refresh: every request checks the version.
        let catalog = Catalog::new(Duration::ZERO, LONG);
        let registry = MemoryRegistry::new();
        let builds = Cell::new(0);
        registry.heartbeat(&worker("w1", &["echo"]), LONG).await?;
        let first = card(&catalog, &registry, &builds).await?;
        assert_eq!(&first.body[..], b"echo");
        assert!(Arc::ptr_eq(
            &first,
            &card(&catalog, &registry, &builds).await?
        ));

        // Another worker with the same entrypoints: a new version, the same document.
        registry.heartbeat(&worker("w2", &["echo"]), LONG).await?;
        assert!(Arc::ptr_eq(
            &first,
            &card(&catalog, &registry, &builds).await?
        ));
        assert_eq!(builds.get(), 1);

        registry.heartbeat(&worker("w3", &["sleep"]), LONG).await?;
        let second = card(&catalog, &registry, &builds).await?;
        assert_eq!(&second.body[..], b"echo,sleep");
        assert_ne!(second.etag, first.etag);
        assert_eq!(builds.get(), 2);
        Ok(())
    }

    #[tokio::test]
    async fn public_documents_never_see_a_private_entrypoint() -> Result<(), StoreError> {
        let catalog = Catalog::new(Duration::ZERO, LONG);
        let registry = MemoryRegistry::new();
        let mut entry = worker("w1", &["echo", "secret"]);
        entry.entrypoints[1].private = true;
        registry.heartbeat(&entry, LONG).await?;
        let builds = Cell::new(0);
        assert_eq!(&card(&catalog, &registry, &builds).await?.body[..], b"echo");
        let snapshot = catalog.snapshot(&registry).await?;
        let keys = |entrypoints: &[EntrypointInfo]| {
            let keys: Vec<&str> = entrypoints.iter().map(|e| e.key.as_str()).collect();
            Ok::<_, Infallible>(keys.join(",").into_bytes())
        };
        let extended = snapshot.member_document("alice", "http://a", keys);
        let extended = extended.unwrap_or_else(|never| match never {});
        assert_eq!(&extended.body[..], b"echo,secret");
        // Admission finds it; whether the caller may run it is the admission's question.
        assert!(catalog.entrypoint(&registry, "secret").await?.is_some());
        let visible: Vec<&str> = snapshot
            .visible(crate::core::members::Viewer::Public)
            .map(|e| e.key.as_str())
            .collect();
        assert_eq!(visible, ["echo"]);
        assert_eq!(
            snapshot
                .visible(crate::core::members::Viewer::Member("alice"))
                .count(),
            2
        );
        Ok(())
    }

    #[tokio::test]
    async fn discovery_may_be_stale_within_the_refresh_but_admission_not_past_the_grace()
    -> Result<(), StoreError> {
        let strict = Catalog::new(LONG, Duration::ZERO);
        let registry = MemoryRegistry::new();
        registry.heartbeat(&worker("w1", &["echo"]), LONG).await?;
        assert!(strict.entrypoint(&registry, "echo").await?.is_some());
        assert_eq!(strict.snapshot(&registry).await?.entrypoints().len(), 1);

        registry.deregister("w1").await?;
        // The card is allowed its hour; admission with no grace reads the version again.
        assert_eq!(strict.snapshot(&registry).await?.entrypoints().len(), 1);
        assert!(strict.entrypoint(&registry, "echo").await?.is_none());
        Ok(())
    }
}
