//! A push source: records another thread (a network client, a callback, a test) pushes into
//! a job. [`channel()`] returns the [`Pusher`] (`Send + Clone`) and the [`ChannelSource`];
//! each push wakes the idle source subtasks, which otherwise cost nothing. The queue is
//! unbounded and shared by every subtask of the source; the source ends once every pusher is
//! dropped (or [closed](Pusher::close)) and the queue is drained.
//!
//! This module owns the queue and its wake-ups; how a subtask waits is in `task`.

use std::collections::VecDeque;

use super::{Source, SourceStatus, SourceWaker};
use crate::error::SourceError;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex};

/// A queue of records for a [`ChannelSource`], and the source subtasks to wake.
struct Shared<T> {
    queue: VecDeque<T>,
    /// The wakers of the running source instances, by instance id.
    wakers: Vec<(u64, SourceWaker)>,
    /// Live pushers; 0: no record follows the queued ones.
    pushers: usize,
}

struct Channel<T> {
    shared: Mutex<Shared<T>>,
    /// Instance ids of [`ChannelSource`] clones.
    next_id: AtomicU64,
}

impl<T> Channel<T> {
    fn wake_all(shared: &Shared<T>) {
        for (_, w) in &shared.wakers {
            w.wake();
        }
    }
}

/// A push source and its pusher: records pushed are read by the source, in push order (with
/// parallelism above 1, each record by one subtask, whichever polls first).
///
/// Use the source in a factory, one clone per subtask; drop every pusher to end the input:
///
/// ```
/// let env = weir::Env::new();
/// let (pusher, source) = weir::source::channel::<u64>();
/// let out = env
///     .add_source("events", move |_| Ok(source.clone()))
///     .map(|x| x * 10)
///     .collect();
/// let job = env.start("pushed").unwrap();
/// std::thread::spawn(move || {
///     for i in 0..3 {
///         pusher.push(i); // the idle source wakes and reads it
///     }
///     // `pusher` dropped: the source ends once it has read everything.
/// });
/// job.wait().unwrap();
/// assert_eq!(out.take(), vec![0, 10, 20]);
/// ```
///
/// The source cannot replay what it read, so by default checkpoints of its job fail, naming
/// it; [`ChannelSource::at_most_once`] accepts checkpoints and loses, after a restore, the
/// records read since the checkpoint restored (the queue itself survives a restart).
pub fn channel<T: Send + 'static>() -> (Pusher<T>, ChannelSource<T>) {
    let channel = Arc::new(Channel {
        shared: Mutex::new(Shared {
            queue: VecDeque::new(),
            wakers: Vec::new(),
            pushers: 1,
        }),
        next_id: AtomicU64::new(1),
    });
    (
        Pusher {
            channel: channel.clone(),
        },
        ChannelSource {
            channel,
            id: 0,
            at_most_once: false,
            read: 0,
        },
    )
}

/// The sending half of a [`channel()`]: `Send + Sync + Clone`, from any thread.
pub struct Pusher<T> {
    channel: Arc<Channel<T>>,
}

impl<T> Pusher<T> {
    /// Queues `record` and wakes the source.
    pub fn push(&self, record: T) {
        let mut s = lock(&self.channel.shared);
        s.queue.push_back(record);
        Channel::wake_all(&s);
    }

    /// Queues every record of `records` and wakes the source once.
    pub fn push_all(&self, records: impl IntoIterator<Item = T>) {
        let mut s = lock(&self.channel.shared);
        s.queue.extend(records);
        Channel::wake_all(&s);
    }

    /// Records queued and not read yet.
    pub fn queued(&self) -> usize {
        lock(&self.channel.shared).queue.len()
    }

    /// Drops this pusher: once every pusher is gone and the queue is drained, the source
    /// ends (and with it the job, if nothing else runs).
    pub fn close(self) {}
}

impl<T> Clone for Pusher<T> {
    fn clone(&self) -> Self {
        lock(&self.channel.shared).pushers += 1;
        Pusher {
            channel: self.channel.clone(),
        }
    }
}

impl<T> Drop for Pusher<T> {
    fn drop(&mut self) {
        let mut s = lock(&self.channel.shared);
        s.pushers -= 1;
        if s.pushers == 0 {
            Channel::wake_all(&s);
        }
    }
}

impl<T> std::fmt::Debug for Pusher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pusher")
            .field("queued", &self.queued())
            .finish()
    }
}

/// The source half of a [`channel()`]. Clone it once per subtask (in the source's factory).
pub struct ChannelSource<T> {
    channel: Arc<Channel<T>>,
    /// This instance (0: the one [`channel()`] returned, which no subtask runs).
    id: u64,
    at_most_once: bool,
    /// Records this instance read (its position, with `at_most_once`).
    read: u64,
}

impl<T> ChannelSource<T> {
    /// Accepts checkpoints: the source's position is only a count, and a restored job goes
    /// on with what is queued, losing the records read since the checkpoint it restores
    /// (at-most-once for them, exactly-once for everything else).
    pub fn at_most_once(mut self) -> Self {
        self.at_most_once = true;
        self
    }
}

impl<T> Clone for ChannelSource<T> {
    fn clone(&self) -> Self {
        ChannelSource {
            channel: self.channel.clone(),
            id: self.channel.next_id.fetch_add(1, Ordering::Relaxed),
            at_most_once: self.at_most_once,
            read: 0,
        }
    }
}

impl<T> Drop for ChannelSource<T> {
    fn drop(&mut self) {
        let id = self.id;
        lock(&self.channel.shared).wakers.retain(|(i, _)| *i != id);
    }
}

impl<T> std::fmt::Debug for ChannelSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSource")
            .field("id", &self.id)
            .field("at_most_once", &self.at_most_once)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Source<T> for ChannelSource<T> {
    fn set_waker(&mut self, waker: SourceWaker) {
        let id = self.id;
        let mut s = lock(&self.channel.shared);
        s.wakers.retain(|(i, _)| *i != id);
        s.wakers.push((id, waker));
    }

    fn poll_batch(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourceStatus, SourceError> {
        let mut s = lock(&self.channel.shared);
        let n = s.queue.len().min(max);
        out.extend(s.queue.drain(..n));
        self.read += n as u64;
        Ok(if !s.queue.is_empty() {
            SourceStatus::More
        } else if s.pushers == 0 {
            SourceStatus::End
        } else {
            SourceStatus::Idle { until: None }
        })
    }

    fn position(&self) -> Option<Vec<u8>> {
        if !self.at_most_once {
            return None;
        }
        crate::checkpoint::encode(&self.read).ok()
    }

    fn seek(&mut self, position: &[u8]) -> Result<(), SourceError> {
        if !self.at_most_once {
            return Err(SourceError::NotReplayable);
        }
        self.read = crate::checkpoint::decode(position)
            .map_err(|message| SourceError::BadPosition { message })?;
        Ok(())
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn reads_in_order_idles_when_empty_and_ends_when_every_pusher_is_gone() {
        let (p, src) = channel::<u32>();
        let mut a = src.clone();
        let waker = SourceWaker::new();
        a.set_waker(waker.clone());
        let mut out = Vec::new();
        assert_eq!(
            a.poll_batch(&mut out, 8).unwrap(),
            SourceStatus::Idle { until: None }
        );
        waker.clear();
        let q = p.clone();
        p.push_all([1, 2, 3]);
        assert!(
            waker.register(futures::task::noop_waker_ref()),
            "a push wakes"
        );
        assert_eq!(a.poll_batch(&mut out, 2).unwrap(), SourceStatus::More);
        drop(p);
        assert_eq!(
            a.poll_batch(&mut out, 2).unwrap(),
            SourceStatus::Idle { until: None },
            "a pusher is left"
        );
        q.close();
        assert_eq!(a.poll_batch(&mut out, 2).unwrap(), SourceStatus::End);
        assert_eq!(out, vec![1, 2, 3]);
        assert!(a.position().is_none(), "not replayable by default");
        drop(a);
        assert!(
            lock(&src.channel.shared).wakers.is_empty(),
            "a dropped instance unregisters"
        );
    }
}
