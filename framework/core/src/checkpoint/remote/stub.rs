//! [`Remote`] without the `object-store` feature: none can exist ([`Remote::open`] fails,
//! naming the feature), so the callers compile the same either way.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::CheckpointError;

/// Without the `object-store` feature no listing can exist either.
pub(crate) struct Listing {
    never: std::convert::Infallible,
}

#[allow(clippy::unused_self, missing_docs)]
impl Listing {
    pub(crate) fn fetch(&self, _: &Path) -> Result<(), CheckpointError> {
        match self.never {}
    }
    pub(crate) fn counts(&self) -> (usize, usize) {
        match self.never {}
    }
}

/// Without the `object-store` feature no remote can exist ([`Remote::open`] fails).
#[derive(Debug)]
pub(crate) struct Remote {
    never: std::convert::Infallible,
}

#[allow(clippy::unused_self, missing_docs)]
impl Remote {
    pub(crate) fn open(
        url: &Path,
        _: &Path,
        _: &[(String, String)],
    ) -> Result<Arc<Remote>, CheckpointError> {
        Err(CheckpointError::Invalid {
            path: url.to_owned(),
            message: super::check_url(url)
                .err()
                .unwrap_or_else(|| "object stores need the `object-store` feature".into()),
        })
    }
    pub(crate) fn local(&self) -> &Path {
        match self.never {}
    }
    pub(crate) fn url(&self) -> &str {
        match self.never {}
    }
    pub(crate) fn upload(&self, _: &Path, _: &dyn Fn() -> bool) -> Result<(), CheckpointError> {
        match self.never {}
    }
    pub(crate) fn upload_as(&self, _: &Path, _: &Path) -> Result<(), CheckpointError> {
        match self.never {}
    }
    pub(crate) fn upload_once(
        &self,
        _: &Path,
        _: &dyn Fn() -> bool,
    ) -> Result<(), CheckpointError> {
        match self.never {}
    }
    pub(crate) fn probe(&self, _: &Path) -> Result<(), CheckpointError> {
        match self.never {}
    }
    pub(crate) fn exists(&self, _: &Path) -> Result<bool, CheckpointError> {
        match self.never {}
    }
    pub(crate) fn fetch_file(&self, _: &Path) -> Result<bool, CheckpointError> {
        match self.never {}
    }
    pub(crate) fn fetch_tree(&self, _: &Path) -> Result<usize, CheckpointError> {
        match self.never {}
    }
    pub(crate) fn mirror_lazily(self: &Arc<Self>, _: &Path) -> Result<Listing, CheckpointError> {
        match self.never {}
    }
    pub(crate) fn put_then(
        &self,
        _: &Path,
        _: Vec<u8>,
        _: impl FnOnce(Result<(), CheckpointError>) + Send + 'static,
    ) {
        match self.never {}
    }
    pub(crate) fn delete_later(self: &Arc<Self>, _: Vec<PathBuf>) {
        match self.never {}
    }
    pub(crate) fn settle(&self) {
        match self.never {}
    }
}
