//! The disk state backend left out of this build (weir's feature `disk-state` is off):
//! `EnvConfig::validate` refuses the backend, so no store is ever opened; the type exists so
//! that the code choosing between backends compiles either way.

use std::collections::HashMap;
use std::convert::Infallible;

use rustc_hash::FxBuildHasher;

use super::backend::DiskBackend;
use super::changes::ChangeLog;
use super::Tracked;

/// Never built.
#[derive(Debug)]
pub(crate) struct DiskEntries<K, S> {
    never: Infallible,
    pub(crate) cache: HashMap<K, Tracked<S>, FxBuildHasher>,
}

impl<K, S> DiskEntries<K, S> {
    pub(crate) fn open(_: &DiskBackend, _: &str, _: usize, _: usize) -> Result<Self, String> {
        Err("the disk state backend needs weir's feature `disk-state`".into())
    }
    pub(crate) fn len(&self) -> usize {
        match self.never {}
    }
    pub(crate) fn fail(&mut self, _: String) {
        match self.never {}
    }
    pub(crate) fn take_error(&mut self) -> Option<String> {
        match self.never {}
    }
    pub(crate) fn stored(&mut self, _: &K) -> Result<Option<Tracked<S>>, String> {
        match self.never {}
    }
    pub(crate) fn load(
        &mut self,
        _: &K,
        _: &mut ChangeLog<K>,
        _: impl FnOnce() -> S,
    ) -> Result<Tracked<S>, String> {
        match self.never {}
    }
    pub(crate) fn insert(&mut self, _: K, _: Tracked<S>) {
        match self.never {}
    }
    pub(crate) fn for_each(
        &mut self,
        _: impl FnMut(&K, &S) -> Result<(), String>,
        _: &dyn Fn(),
    ) -> Result<(), String> {
        match self.never {}
    }
    pub(crate) fn load_all(&mut self) -> Result<(), String> {
        match self.never {}
    }
    pub(crate) fn restore(&mut self, _: K, _: S) {
        match self.never {}
    }
}
