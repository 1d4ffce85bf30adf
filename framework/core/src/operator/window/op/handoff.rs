//! A backed-up window operator's hand-offs to its buffer-queue backup: the keys whose windows
//! changed since the last one (records added, windows fired, slices purged, keys gone), each
//! key's windows encoded on its own (`operator::handoff`). Owns the operator's own fields'
//! form; not the windows (`op`) nor the change log (`operator::handoff`).

use super::{WindowOp, STATE_NAME, STATE_VERSION, WATERMARK_FIELD};
use crate::checkpoint::StateWriter;
use crate::error::TaskError;
use crate::operator::window::WindowFn;

impl<KF, K, I, R, G> WindowOp<KF, K, I, R, G>
where
    K: crate::Key,
    G: WindowFn<K, I, R>,
{
    /// The operator's own fields (its watermark), as its snapshot and hand-offs carry them.
    pub(super) fn own_fields(&self) -> Result<crate::hooks::StateSnapshot, TaskError> {
        use crate::hooks::__private as p;
        let mut fields = Vec::new();
        p::put_field(
            &mut fields,
            STATE_NAME,
            WATERMARK_FIELD,
            &vec![self.inner.watermark],
        )
        .and_then(|()| p::encode(STATE_NAME, STATE_VERSION, fields))
        .map_err(|e| self.core.state_error(e.to_string()))
    }

    /// The whole snapshot: the operator's own fields, then every key's windows by key group.
    /// `progress` is called now and then while a large state is encoded (a backed-up
    /// primary's: its supervisor must not take it for hung meanwhile).
    pub(super) fn whole_payload(
        &self,
        progress: Option<&crate::checkpoint::Progress>,
    ) -> Result<Vec<u8>, TaskError> {
        use crate::operator::keyed::{by_key_group, SaidSeq, Saying};
        let own = self.own_fields()?;
        let said = Saying::new(progress);
        said.tick();
        let groups = by_key_group(&self.inner.keys, self.max_parallelism);
        said.tick();
        let groups: Vec<(usize, SaidSeq<'_, '_, _>)> = groups
            .iter()
            .map(|(g, entries)| (*g, SaidSeq(entries, &said)))
            .collect();
        crate::checkpoint::encode(&(own, groups)).map_err(|e| self.core.state_error(e))
    }

    /// Hands what changed since the last hand-off to `w`: each changed key's windows, or
    /// its removal.
    pub(super) fn hand_changes(&mut self, w: &mut StateWriter) -> Result<(), TaskError> {
        let own = self.own_fields()?;
        let own = crate::checkpoint::encode(&own).map_err(|e| self.core.state_error(e))?;
        let inner = &mut self.inner;
        let keys = &inner.keys;
        crate::operator::handoff::hand_changes(
            w,
            &self.core.info,
            self.max_parallelism,
            &mut inner.changed,
            own,
            keys.keys(),
            |k| keys.get(k),
        )
        .map_err(|e| self.core.state_error(e))
    }
}
