//! `Running`'s commands that change settings: live settings (planned, checked, then applied,
//! all or none), a rollback to the settings of the last completed checkpoint, an operator's
//! `#[weir(config)]` field, and rate control. The controller takes them one at a time, so
//! two changes never interleave, and records each in the settings history (applied or
//! refused) in the order it took them. Operator fields are checked on a copy of the first
//! subtask's operator, then set in every subtask at once through their system lanes; the
//! controller waits for the answers at most half the shortest heartbeat timeout that watches
//! those subtasks (its loop does not serve heartbeats meanwhile, so a longer wait could make
//! a healthy subtask look hung).
//!
//! What each setting means and how it parses is `crate::settings`'s.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::checkpoint::CheckpointConfig;
use crate::controller::command::{ConfigureRequest, Reply, SettingsRequest};
use crate::controller::JobContext;
use crate::detector::check_every;
use crate::hooks::ConfigError;
use crate::rate::RateControlConfig;
use crate::sampler::RateController;
use crate::settings::{Applies, ChangeRecord, Parsed, PlannedChange, RollbackReport, SettingError};

use super::{tick_every, Running};

/// An operator field among the changes: (setting name, uid, key, value).
type FieldChange = (String, String, String, String);

/// Job-level changes, checked against the job and ready to apply.
struct Checked {
    checkpoint: CheckpointConfig,
    /// Backed-up operators' heartbeats: (node, interval, timeout) after the changes.
    backups: Vec<(usize, Duration, Duration)>,
    rate_control: Option<RateControlConfig>,
    /// The parsed changes (for the log).
    changes: Vec<Parsed>,
}

impl Running {
    /// `Command::Settings`: the change applied or refused whole, recorded in the history.
    pub(super) async fn on_settings(&mut self, ctx: &mut JobContext, request: SettingsRequest) {
        let before = ctx.views.load().settings.clone();
        let r = self.update_settings(ctx, &request.changes).await;
        record(
            ctx,
            &before,
            &request.changes,
            &request.caller,
            r.as_ref().err(),
        );
        let _ = request.reply.send(r);
    }

    /// `Command::RollbackSettings`: every setting changed since the last completed checkpoint
    /// back to its value then (caller `rollback`).
    pub(super) async fn on_rollback(
        &mut self,
        ctx: &mut JobContext,
        reply: Reply<Result<RollbackReport, SettingError>>,
    ) {
        let now = ctx.views.load().settings.clone();
        let mut changes = Vec::new();
        let mut kept = Vec::new();
        for (name, value) in &now {
            match ctx.good_settings.get(name) {
                // A controlled rate comes back through the `weir.rate-control.*` settings.
                Some(v) if name == crate::settings::SOURCE_RATE && v == "controlled" => {}
                Some(v) if v != value => changes.push((name.clone(), v.clone())),
                Some(_) => {}
                None => kept.push(name.clone()),
            }
        }
        let applied = if changes.is_empty() {
            Ok(Vec::new())
        } else {
            let r = self.update_settings(ctx, &changes).await;
            record(ctx, &now, &changes, "rollback", r.as_ref().err());
            r
        };
        let _ = reply.send(applied.map(|applied| RollbackReport { applied, kept }));
    }

    /// `Command::Configure`: one operator field in every subtask (the first to refuse stops
    /// it), recorded as the setting `operator.<uid>.<key>`.
    pub(super) async fn on_configure(&mut self, ctx: &mut JobContext, request: ConfigureRequest) {
        let ConfigureRequest {
            uid,
            key,
            value,
            reply,
        } = request;
        let r = self.configure(ctx, &uid, &key, &value).await;
        if r.is_ok() {
            let name = format!("{}{uid}.{key}", crate::settings::OPERATOR_PREFIX);
            let before = ctx.views.load().settings.clone();
            ctx.views
                .update(|v| v.settings.insert(name.clone(), value.clone()));
            record(ctx, &before, &[(name, value)], "rust", None);
        }
        let _ = reply.send(r);
    }

    /// Plans, checks and applies `changes`, all or none.
    async fn update_settings(
        &mut self,
        ctx: &mut JobContext,
        changes: &[(String, String)],
    ) -> Result<Vec<PlannedChange>, SettingError> {
        let view = ctx.views.load();
        let planned = changes
            .iter()
            .map(|(n, v)| crate::settings::plan_one(n, v, &view.settings))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some((name, why)) = planned.iter().find_map(|p| match &p.applies {
            Applies::FastRestart { why } => Some((p.name.clone(), why.clone())),
            _ => None,
        }) {
            return Err(SettingError::NotLive { name, why });
        }
        let uids: Vec<&str> = view
            .vertices
            .iter()
            .flat_map(|v| v.operators.iter().map(String::as_str))
            .collect();
        let mut job_level = Vec::new();
        let mut named = Vec::new();
        let mut fields: Vec<FieldChange> = Vec::new();
        for (name, value) in changes {
            match crate::settings::parse(name, value)? {
                Parsed::Operator { uid, key } => {
                    let (uid, key) =
                        crate::settings::resolve_operator(&uid, &key, uids.iter().copied());
                    fields.push((name.clone(), uid, key, value.clone()))
                }
                p => {
                    job_level.push(p);
                    named.push((name.clone(), value.clone()));
                }
            }
        }
        let checked = if job_level.is_empty() {
            None
        } else {
            Some(self.check_settings(ctx, job_level)?)
        };
        for field in &fields {
            self.check_field(ctx, field).await?;
        }
        for (name, uid, key, value) in &fields {
            self.configure(ctx, uid, key, value)
                .await
                .map_err(|e| SettingError::Operator {
                    name: name.clone(),
                    message: e.to_string(),
                })?;
            ctx.views
                .update(|v| v.settings.insert(name.clone(), value.clone()));
        }
        if let Some(checked) = checked {
            self.apply_settings(ctx, checked);
            // Rate settings are written as the controller holds them (`set_rate_control`).
            ctx.views.update(|v| {
                for (name, value) in named {
                    if !crate::settings::is_rate(&name) {
                        v.settings.insert(name, value);
                    }
                }
            });
        }
        Ok(planned)
    }

    /// Checks an operator field's new value on a copy of the first subtask's operator.
    async fn check_field(
        &self,
        ctx: &JobContext,
        (name, uid, key, value): &FieldChange,
    ) -> Result<(), SettingError> {
        let refused = |message: String| SettingError::Operator {
            name: name.clone(),
            message,
        };
        let Some(entry) = crate::controller::deployment::subtasks_of(&self.dep.actors, uid)
            .into_iter()
            .next()
        else {
            return Err(refused(format!("no running operator has uid `{uid}`")));
        };
        let validate = crate::task::ValidateConfig {
            uid: uid.clone(),
            key: key.clone(),
            value: value.clone(),
        };
        let within = self.ask_within(ctx);
        match entry.ask(validate, within).await {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(refused(e.to_string())),
            None => Err(SettingError::Busy(format!(
                "operator `{uid}` did not answer within {within:?}"
            ))),
        }
    }

    /// How long the controller waits for subtasks' answers: half the shortest heartbeat
    /// timeout watching them.
    fn ask_within(&self, ctx: &JobContext) -> Duration {
        let shortest = self
            .dep
            .backups
            .iter()
            .map(|b| b.heartbeats.timeout())
            .fold(ctx.cfg.heartbeat_timeout, Duration::min);
        shortest / 2
    }

    /// Sets field `key` of operator `uid` in every subtask at once. A bad key or value is
    /// refused by every subtask alike (none changes); otherwise the change is recorded so that
    /// restarted and promoted instances apply it too — also when a subtask did not answer in
    /// time (it was sent, and applies there when the subtask reads it): that is
    /// [`ConfigError::NoAnswer`], with the change kept.
    async fn configure(
        &self,
        ctx: &JobContext,
        uid: &str,
        key: &str,
        value: &str,
    ) -> Result<(), ConfigError> {
        let entries = crate::controller::deployment::subtasks_of(&self.dep.actors, uid);
        if entries.is_empty() {
            return Err(ConfigError::NoSuchOperator {
                uid: uid.to_owned(),
            });
        }
        let within = self.ask_within(ctx);
        let answers = futures::future::join_all(entries.iter().map(|entry| {
            let configure = crate::task::Configure {
                uid: uid.to_owned(),
                key: key.to_owned(),
                value: value.to_owned(),
            };
            entry.ask(configure, within)
        }))
        .await;
        let mut applied = false;
        let mut first_error = None;
        for (entry, answer) in entries.iter().zip(answers) {
            match answer {
                Some(Ok(())) => applied = true,
                Some(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                None => {
                    applied = true;
                    first_error.get_or_insert(ConfigError::NoAnswer {
                        uid: uid.to_owned(),
                        subtask: entry.subtask,
                        within,
                    });
                }
            }
        }
        if applied {
            let mut live = crate::sync::lock(&ctx.registry.live_config);
            let changes = live.entry(uid.to_owned()).or_default();
            changes.retain(|(k, _)| k != key);
            changes.push((key.to_owned(), value.to_owned()));
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Checks job-level changes against the job: the checkpoint settings they make, backed-up
    /// operators' heartbeats, and the rate control.
    fn check_settings(
        &self,
        ctx: &JobContext,
        changes: Vec<Parsed>,
    ) -> Result<Checked, SettingError> {
        let mut cp = ctx.cfg.checkpoint.clone();
        let mut rate = None;
        let mut rate_fields = Vec::new();
        for c in &changes {
            match c {
                Parsed::Interval(i) => cp.interval = *i,
                Parsed::Timeout(d) => cp.timeout = *d,
                Parsed::MinPause(d) => cp.min_pause = *d,
                Parsed::Mode(m) => cp.mode = *m,
                Parsed::Unaligned(u) => cp.unaligned = *u,
                Parsed::AlignedTimeout(t) => cp.aligned_checkpoint_timeout = *t,
                Parsed::Tolerable(n) => cp.tolerable_failed_checkpoints = *n,
                Parsed::MaxConcurrent(n) => cp.max_concurrent = *n,
                Parsed::SourceRate(r) => rate = Some(*r),
                Parsed::Rate(f) => rate_fields.push(*f),
                Parsed::Operator { .. } | Parsed::Backup { .. } => {}
            }
        }
        let backups = heartbeats(ctx, &changes)?;
        let mut cfg = ctx.cfg.clone();
        cfg.checkpoint = cp.clone();
        cfg.validate().map_err(|e| SettingError::BadValue {
            name: "execution.checkpointing".into(),
            message: e.to_string(),
        })?;
        // The rate: a fixed `weir.source.rate` first, then any `weir.rate-control.*` field.
        let rate_control = (rate.is_some() || !rate_fields.is_empty()).then(|| {
            let mut rc = match rate {
                Some(Some(r)) => RateControlConfig::fixed(r),
                Some(None) => RateControlConfig::default(),
                None => ctx.cfg.rate_control.clone(),
            };
            for f in &rate_fields {
                f.apply(&mut rc);
            }
            rc
        });
        if let Some(rc) = &rate_control {
            rc.validate().map_err(|e| SettingError::BadValue {
                name: crate::settings::rate_setting(e.field).into(),
                message: e.message,
            })?;
        }
        let unaligned = cp.unaligned || cp.aligned_checkpoint_timeout.is_some();
        if let Some(why) = self.bound.changing().filter(|_| unaligned) {
            return Err(SettingError::Busy(why.into()));
        }
        Ok(Checked {
            checkpoint: cp,
            backups,
            rate_control,
            changes,
        })
    }

    /// Applies checked job-level changes: checkpoint settings to the coordinator (the next
    /// trigger) and, for alignment, to every subtask (between two checkpoints); heartbeats to
    /// the backed-up subtasks; a source rate to the sources.
    fn apply_settings(&mut self, ctx: &mut JobContext, checked: Checked) {
        let Checked {
            checkpoint: cp,
            backups,
            rate_control,
            changes,
        } = checked;
        for &(node, interval, timeout) in &backups {
            // The graph's policy too: a restarted deployment keeps the change.
            if let Some(p) = ctx.graph.nodes[node].backup.as_mut() {
                p.heartbeat_interval = interval;
                p.heartbeat_timeout = timeout;
            }
            let uid = ctx.plan.uids[node].clone();
            for slot in self.dep.backups.iter_mut().filter(|s| s.group.uid() == uid) {
                slot.heartbeats.set(interval, timeout);
            }
        }
        if !backups.is_empty() {
            let every = check_every(self.dep.backups.iter().map(|b| b.heartbeats.interval()));
            self.heartbeats = actix_rt::time::interval(every);
        }
        let old = std::mem::replace(&mut ctx.cfg.checkpoint, cp.clone());
        ctx.coordinator.reconfigure(&cp);
        if (old.mode, old.unaligned, old.aligned_checkpoint_timeout)
            != (cp.mode, cp.unaligned, cp.aligned_checkpoint_timeout)
        {
            let s = crate::task::AlignmentSettings::of(&cp);
            self.dep.mail_running(|| crate::task::SetAlignment(s));
        }
        if let Some(config) = rate_control {
            set_rate_control(ctx, config);
            self.dep.set_rate(ctx.rate.as_ref().and_then(|c| c.current));
        }
        ctx.views.update(|v| v.checkpoint_config = cp);
        // The tick triggers checkpoints: it follows a new interval (or rate update) now.
        let every = tick_every(ctx);
        if every != self.ticks.period() {
            self.ticks = actix_rt::time::interval(every);
        }
        tracing::info!(?changes, "live settings applied");
    }
}

/// The heartbeats of backed-up operators after `changes`: (node, interval, timeout), each
/// checked (interval below timeout, timeout below the job's).
fn heartbeats(
    ctx: &JobContext,
    changes: &[Parsed],
) -> Result<Vec<(usize, Duration, Duration)>, SettingError> {
    let mut backups: Vec<(usize, Duration, Duration)> = Vec::new();
    for c in changes {
        let Parsed::Backup {
            uid,
            timeout,
            value,
        } = c
        else {
            continue;
        };
        let name = format!(
            "{}{uid}.heartbeat-{}",
            crate::settings::BACKUP_PREFIX,
            if *timeout { "timeout" } else { "interval" }
        );
        let node = ctx
            .plan
            .uids
            .iter()
            .position(|u| u == uid)
            .filter(|&n| ctx.graph.nodes[n].backup.is_some())
            .ok_or_else(|| SettingError::BadValue {
                name: name.clone(),
                message: format!("no backed-up operator has uid `{uid}`"),
            })?;
        let entry = match backups.iter_mut().find(|(n, _, _)| *n == node) {
            Some(e) => e,
            None => {
                let p = ctx.graph.nodes[node].backup.clone().unwrap_or_default();
                backups.push((node, p.heartbeat_interval, p.heartbeat_timeout));
                backups.last_mut().expect("just pushed")
            }
        };
        if *timeout {
            entry.2 = *value;
        } else {
            entry.1 = *value;
        }
    }
    for &(node, interval, timeout) in &backups {
        let uid = &ctx.plan.uids[node];
        if interval >= timeout || timeout >= ctx.cfg.heartbeat_timeout {
            return Err(SettingError::BadValue {
                name: format!("{}{uid}.heartbeat-timeout", crate::settings::BACKUP_PREFIX),
                message: format!(
                    "the heartbeat interval ({interval:?}) must be below the timeout ({timeout:?}), and the timeout below the job's heartbeat_timeout ({:?})",
                    ctx.cfg.heartbeat_timeout
                ),
            });
        }
    }
    Ok(backups)
}

/// Adds a settings request to the history: each (setting, value before, value asked for),
/// and `applied` or why it was refused.
pub(crate) fn record(
    ctx: &JobContext,
    before: &BTreeMap<String, String>,
    changes: &[(String, String)],
    caller: &str,
    refused: Option<&SettingError>,
) {
    let record = ChangeRecord {
        at_ms: crate::metrics::now_ms(),
        caller: caller.to_owned(),
        changes: changes
            .iter()
            .map(|(n, v)| (n.clone(), before.get(n).cloned(), v.clone()))
            .collect(),
        outcome: refused.map_or_else(|| "applied".into(), |e| e.to_string()),
    };
    ctx.views.update(|v| v.settings_history.push(record));
}

/// Puts rate control `config` in force: the job's config and settings, a rate controller that
/// keeps the current rate until the next estimate, and whether batches adapt (they do not
/// while a source is rate-limited, `partition::AdaptBatches`).
pub(crate) fn set_rate_control(ctx: &mut JobContext, config: RateControlConfig) {
    ctx.views
        .update(|v| v.settings.extend(crate::settings::rate_values(&config)));
    let previous = ctx.rate.as_ref().and_then(|c| c.current);
    ctx.rate = RateController::new(config.clone());
    if let Some(c) = ctx.rate.as_mut() {
        c.inherit(previous);
    }
    ctx.cfg.rate_control = config;
    ctx.registry.adapt_batches.follow(&ctx.cfg);
}
