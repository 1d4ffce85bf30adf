//! Collects records into memory: for tests and small results.

use super::Sink;
use crate::error::SinkError;
use crate::sync::{lock, Arc, Mutex};

/// Handle to the records a `collect()` sink received, from every subtask (in arrival order
/// per subtask; subtasks interleave).
///
/// ```
/// use weir::Env;
/// let env = Env::new();
/// let out = env.from_collection(vec![1u32, 2, 3]).map(|x| x * 10).collect();
/// env.execute("collect-doc").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![10, 20, 30]);
/// ```
#[derive(Debug)]
pub struct CollectSink<T> {
    items: Arc<Mutex<Vec<T>>>,
}

impl<T> Clone for CollectSink<T> {
    fn clone(&self) -> Self {
        CollectSink {
            items: self.items.clone(),
        }
    }
}

impl<T> Default for CollectSink<T> {
    fn default() -> Self {
        CollectSink {
            items: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl<T: Clone> CollectSink<T> {
    /// Takes the records collected so far.
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *lock(&self.items))
    }
    /// A copy of the records collected so far.
    pub fn snapshot(&self) -> Vec<T> {
        lock(&self.items).clone()
    }
    /// How many records were collected so far.
    pub fn len(&self) -> usize {
        lock(&self.items).len()
    }
    /// Whether nothing was collected yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Send + 'static> Sink<T> for CollectSink<T> {
    fn write_batch(&mut self, batch: &mut Vec<T>) -> Result<(), SinkError> {
        lock(&self.items).append(batch);
        Ok(())
    }
}
