//! A promoted backup's keyed state until all of it is read in.
//!
//! A backup keeps its primary's keyed state encoded (`changes::KeyedImage`). Decoding all of
//! it when the backup is promoted would make the promotion cost the whole state (about half a
//! second per million keys); instead the promoted operator starts from a clone of the image
//! (its key groups shared, not copied) and [`Promoted`] reads an entry in when the operator
//! first meets its key, and the others a few at a time as the operator works, until none is
//! left, dropping each key group of the image once all of it is read in (so its memory goes a
//! part at a time). A key read in is the map's from then on: the image changes under the
//! reader only by those drops, and keys are never removed from a keyed state, so the map's
//! entry is always the newer.
//!
//! The hand-offs the backup had not applied to its image yet come with it
//! (`changes::pending`): a key is looked up in them first, newest first, and they are read in
//! before the image, newest first, each key's first entry read in being the one kept (the
//! map takes an entry only for a key it does not hold).
//!
//! It owns reading the image; not the image (`changes`), nor the map the entries go to
//! (`KeyedState`), nor the entries' timers (the keyed operator restores those when it is
//! built: a timer must fire whether or not its key is met).

use std::collections::VecDeque;
use std::hash::Hash;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::changes::{key_bytes_hash, KeyedImage, Pending, PromotedImage};

/// See the module doc.
#[derive(Debug)]
pub(crate) struct Promoted {
    image: KeyedImage,
    /// Hand-offs not in the image, newest first; the first `read.0` of them read in whole,
    /// and `read.1` entries of the next.
    pending: Vec<Pending>,
    read: (usize, usize),
    max_parallelism: usize,
    /// A key's encoding (scratch).
    key: Vec<u8>,
    /// Key groups not read in whole yet, ascending; entries of the first one read in so far.
    groups: VecDeque<u32>,
    at: usize,
    /// The first entry that could not be read.
    error: Option<String>,
}

/// A keyed entry's key and state (its timers, if any, skipped).
struct KeyState<K, S>(K, S);

impl<'de, K: Deserialize<'de>, S: Deserialize<'de>> Deserialize<'de> for KeyState<K, S> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<K, S>(PhantomData<(K, S)>);
        impl<'de, K: Deserialize<'de>, S: Deserialize<'de>> Visitor<'de> for V<K, S> {
            type Value = KeyState<K, S>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a keyed entry: [key, state] or [key, state, timers]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                use serde::de::Error;
                let key = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(0, &self))?;
                let state = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(1, &self))?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(KeyState(key, state))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

fn decode<K: DeserializeOwned, S: DeserializeOwned>(entry: &[u8]) -> Result<(K, S), String> {
    let KeyState(k, s) = ciborium::from_reader::<KeyState<K, S>, _>(entry)
        .map_err(|e| format!("a promoted backup cannot read its state: {e}"))?;
    Ok((k, s))
}

impl Promoted {
    pub(crate) fn new(image: PromotedImage, max_parallelism: usize) -> Self {
        let PromotedImage { image, pending } = image;
        Promoted {
            groups: image.group_numbers().into(),
            image,
            pending,
            read: (0, 0),
            max_parallelism,
            key: Vec::new(),
            at: 0,
            error: None,
        }
    }

    /// The state `key` had at the promotion, if it had one.
    pub(crate) fn get<K, S>(&mut self, key: &K) -> Result<Option<S>, String>
    where
        K: Serialize + Hash + DeserializeOwned,
        S: DeserializeOwned,
    {
        let group = crate::key_group::key_group_of(key, self.max_parallelism) as u32;
        self.key.clear();
        ciborium::into_writer(key, &mut self.key).map_err(|e| e.to_string())?;
        if !self.pending.is_empty() {
            let hash = key_bytes_hash(&self.key);
            if let Some(entry) = self.pending.iter().find_map(|p| p.get(&self.key, hash)) {
                return decode::<K, S>(entry).map(|(_, s)| Some(s));
            }
        }
        match self.image.get(group, &self.key) {
            Some(entry) => decode::<K, S>(entry).map(|(_, s)| Some(s)),
            None => Ok(None),
        }
    }

    /// Reads in up to `n` more entries, calling `f` with each (whose key may be held already,
    /// with a newer state). `Ok(true)`: every entry was read.
    pub(crate) fn read_in<K, S>(
        &mut self,
        mut n: usize,
        mut f: impl FnMut(K, S),
    ) -> Result<bool, String>
    where
        K: DeserializeOwned,
        S: DeserializeOwned,
    {
        while let Some(p) = self.pending.get(self.read.0) {
            for (read, entry) in p.entries(self.read.1).enumerate() {
                if n == 0 {
                    self.read.1 += read;
                    return Ok(false);
                }
                let (k, s) = decode::<K, S>(entry)?;
                f(k, s);
                n -= 1;
            }
            self.read = (self.read.0 + 1, 0);
        }
        // Every pending key is in the map now: `get` is not asked for them again.
        self.pending = Vec::new();
        while let Some(&group) = self.groups.front() {
            for (read, entry) in self.image.entries_in(group).skip(self.at).enumerate() {
                if n == 0 {
                    self.at += read;
                    return Ok(false);
                }
                let (k, s) = decode::<K, S>(entry)?;
                f(k, s);
                n -= 1;
            }
            // Every key of the group is in the map now: its entries go, a group at a time
            // (freeing the whole image at once could keep a large state's operator from its
            // heartbeats).
            self.groups.pop_front();
            self.image.remove_group(group);
            self.at = 0;
        }
        Ok(true)
    }

    /// Keeps the first error met reading in the state (the operator fails with it).
    pub(crate) fn fail(&mut self, e: String) {
        self.error.get_or_insert(e);
    }

    /// The first error since the last call.
    pub(crate) fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;
    use crate::state::changes::KeyedDelta;

    fn image(entries: &[(u64, &str)], timers_of: Option<u64>) -> KeyedImage {
        let mut d = KeyedDelta::new(true);
        for (k, v) in entries {
            let group = crate::key_group::key_group_of(k, 8);
            if Some(*k) == timers_of {
                d.push(group, k, Some(&(*k, v.to_string(), vec![(5u64, 0u8)])))
            } else {
                d.push(group, k, Some(&(*k, v.to_string())))
            }
            .expect("encodes");
        }
        let mut image = KeyedImage::default();
        image.apply(d);
        image
    }

    #[test]
    fn keys_are_read_when_met_and_the_rest_in_parts() {
        let entries: Vec<(u64, String)> = (0..100).map(|k| (k, format!("v{k}"))).collect();
        let refs: Vec<(u64, &str)> = entries.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let img = image(&refs, Some(7));
        assert!(img.has_timers());
        let mut p = Promoted::new(PromotedImage::of(img), 8);
        assert_eq!(p.get::<u64, String>(&7).expect("reads"), Some("v7".into()));
        assert_eq!(p.get::<u64, String>(&1000).expect("reads"), None);
        let mut read = Vec::new();
        let mut parts = 0;
        while !p
            .read_in::<u64, String>(9, |k, s| read.push((k, s)))
            .expect("reads")
        {
            parts += 1;
        }
        assert!(parts >= 100 / 9, "read in parts of at most 9");
        read.sort();
        assert_eq!(read, entries, "every entry once");
    }

    #[test]
    fn pending_hand_offs_are_found_and_read_in_before_the_image_newest_first() {
        let entries: Vec<(u64, String)> = (0..50).map(|k| (k, format!("v{k}"))).collect();
        let refs: Vec<(u64, &str)> = entries.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let handed = |entries: &[(u64, &str)]| {
            let mut d = KeyedDelta::new(false);
            for (k, v) in entries {
                let group = crate::key_group::key_group_of(k, 8);
                d.push(group, k, Some(&(*k, v.to_string())))
                    .expect("encodes");
            }
            std::sync::Arc::new(d)
        };
        let older = handed(&[(3, "older"), (4, "older"), (60, "new key")]);
        let newer = handed(&[(3, "newer")]);
        let mut p = Promoted::new(
            PromotedImage {
                image: image(&refs, None),
                pending: vec![Pending::new(newer, 0), Pending::new(older, 0)],
            },
            8,
        );
        assert_eq!(
            p.get::<u64, String>(&3).expect("reads"),
            Some("newer".into())
        );
        assert_eq!(
            p.get::<u64, String>(&4).expect("reads"),
            Some("older".into())
        );
        assert_eq!(
            p.get::<u64, String>(&60).expect("reads"),
            Some("new key".into())
        );
        assert_eq!(p.get::<u64, String>(&5).expect("reads"), Some("v5".into()));
        assert_eq!(p.get::<u64, String>(&61).expect("reads"), None);
        // As the keyed state reads in: the first entry of a key it meets is the one it keeps.
        let mut map = std::collections::BTreeMap::new();
        while !p
            .read_in::<u64, String>(2, |k, s| {
                map.entry(k).or_insert(s);
            })
            .expect("reads")
        {}
        let mut want: std::collections::BTreeMap<u64, String> = entries.into_iter().collect();
        want.insert(3, "newer".into());
        want.insert(4, "older".into());
        want.insert(60, "new key".into());
        assert_eq!(map, want);
        assert!(p.pending.is_empty(), "dropped once read in");
    }

    #[test]
    fn an_entry_of_another_type_is_an_error_naming_it() {
        let mut p = Promoted::new(PromotedImage::of(image(&[(1, "x")], None)), 8);
        let e = p.get::<u64, u64>(&1).expect_err("a string is not a u64");
        assert!(e.contains("cannot read its state"), "{e}");
    }
}
