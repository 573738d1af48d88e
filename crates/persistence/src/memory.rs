//! [`MemoryStore`]: a store that keeps sessions in memory. For tests and
//! examples; it is also the reference the contract kit is checked against.

use std::collections::BTreeMap;
use std::sync::Mutex;

use palimpsest_core_session::{Event, SessionHeader};

use crate::error::StoreError;
use crate::store::{check_continues, check_header, LoadReport, SessionStore, StoredSession};

/// Sessions in memory, lost when dropped.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<BTreeMap<String, (SessionHeader, Vec<Event>)>>,
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (SessionHeader, Vec<Event>)>> {
        // A panic while holding the lock cannot leave a half-written batch
        // (batches are pushed with one extend), so a poisoned map is usable.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SessionStore for MemoryStore {
    fn create(&self, header: &SessionHeader) -> Result<(), StoreError> {
        check_header(header)?;
        let mut map = self.lock();
        if map.contains_key(&header.id) {
            return Err(StoreError::AlreadyExists { session_id: header.id.clone() });
        }
        map.insert(header.id.clone(), (header.clone(), Vec::new()));
        Ok(())
    }

    fn create_with_events(&self, header: &SessionHeader, events: &[Event]) -> Result<(), StoreError> {
        check_header(header)?;
        check_continues(&header.id, 0, events)?;
        let mut map = self.lock();
        if map.contains_key(&header.id) {
            return Err(StoreError::AlreadyExists { session_id: header.id.clone() });
        }
        map.insert(header.id.clone(), (header.clone(), events.to_vec()));
        Ok(())
    }

    fn append(&self, session_id: &str, events: &[Event]) -> Result<(), StoreError> {
        let mut map = self.lock();
        let (_, log) = map
            .get_mut(session_id)
            .ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })?;
        check_continues(session_id, log.len() as u64, events)?;
        log.extend_from_slice(events);
        Ok(())
    }

    fn load(&self, session_id: &str) -> Result<StoredSession, StoreError> {
        let map = self.lock();
        let (header, events) =
            map.get(session_id).ok_or_else(|| StoreError::NotFound { session_id: session_id.to_owned() })?;
        Ok(StoredSession { header: header.clone(), events: events.clone(), report: LoadReport::default() })
    }

    fn list(&self) -> Result<Vec<SessionHeader>, StoreError> {
        Ok(self.lock().values().map(|(h, _)| h.clone()).collect())
    }

    fn delete(&self, session_id: &str) -> Result<(), StoreError> {
        match self.lock().remove(session_id) {
            Some(_) => Ok(()),
            None => Err(StoreError::NotFound { session_id: session_id.to_owned() }),
        }
    }

    fn sync(&self, _session_id: &str) -> Result<(), StoreError> {
        Ok(())
    }
}
