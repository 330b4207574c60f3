//! What the store does with a file's [`Body`]: its keyed id, its class, its bytes poured
//! into a write, and keeping a large one — each in pieces, never the whole body at once.
//!
//! Invariants:
//! - The id of a body is the keyed digest of exactly the bytes a pass over it produced; an
//!   open file that changed meanwhile fails the pass (`conflict`) instead of yielding the
//!   id of a prefix.
//! - [`keep`] packs an open file as it reads it ([`Packer::stream`]): its blocks are stored
//!   in their own transactions as they fill and its index entry last, so memory holds a
//!   few blocks whatever the file's size. Until a record names it, the content is as
//!   unreferenced as a snapshot's ahead of its commit: the caller holds the objects lock
//!   shared ([`lock::objects`](crate::fs::lock::objects)) until the record that names it is
//!   committed, so `gc` cannot sweep it in between.
//! - Pouring a stored body verifies its digest only at the end: a write that pours one
//!   must discard what it wrote on an error (every write of `fs::files` does).

use crate::error::{Error, ErrorCode, Result};
use crate::fs::body::{self, Body, Source};
use crate::storage::content::{BINARY_SNIFF_LEN, ContentClass, ContentId};
use crate::storage::keys::KeyRing;
use crate::storage::kv::KeyValueStore;
use crate::storage::object;
use crate::storage::pack::{Packer, SealedPack};

/// Full blocks a [`keep`] seals and stores at once.
const KEEP_BLOCKS: usize = 2;

/// A body the store holds: its id, size and class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kept {
    pub id: ContentId,
    pub size: u64,
    pub class: ContentClass,
}

/// The keyed id of `body`'s bytes (an open file is read once, in pieces).
///
/// # Errors
/// `conflict` if an open file changed while it was read; `io`.
pub(crate) fn id(keys: &KeyRing, body: &Body) -> Result<ContentId> {
    match body {
        Body::Held(bytes) => Ok(ContentId(keys.content_id(bytes))),
        Body::Stored { id, .. } => Ok(ContentId(*id)),
        Body::Open { file, size } => {
            let mut mac = keys.content_id_streaming(*size);
            body::read_open(file, *size, &mut |piece| {
                mac.update(piece);
                Ok(())
            })?;
            mac.finish().map(ContentId).ok_or_else(|| Error::new(ErrorCode::Conflict, "a file changed while read"))
        }
    }
}

/// The content class of `body` (from its first bytes, or the stored object's header).
///
/// # Errors
/// `io` reading an open file; `corrupt` or `not-found` for a stored body the store lacks.
pub(crate) fn class(kv: &dyn KeyValueStore, body: &Body) -> Result<ContentClass> {
    match body {
        Body::Held(bytes) => Ok(ContentClass::of(bytes)),
        Body::Open { file, size } => {
            use std::os::unix::fs::FileExt;
            let mut head = vec![0u8; BINARY_SNIFF_LEN.min(usize::try_from(*size).unwrap_or(BINARY_SNIFF_LEN))];
            file.read_exact_at(&mut head, 0).map_err(|e| Error::new(ErrorCode::Io, format!("reading a file: {e}")))?;
            Ok(ContentClass::of(&head))
        }
        Body::Stored { id, .. } => object::header(kv, &ContentId(*id))?
            .map(|h| h.class)
            .ok_or_else(|| Error::not_found(format!("object {}", ContentId(*id).to_hex()))),
    }
}

/// A body with what it takes to read it: a [`Source`] for the writes of `fs::files`.
pub(crate) struct Pour<'a> {
    pub keys: &'a KeyRing,
    pub kv: &'a dyn KeyValueStore,
    pub body: &'a Body,
}

impl Source for Pour<'_> {
    fn pour(&self, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        match self.body {
            Body::Held(bytes) => bytes.pour(out),
            Body::Open { file, size } => body::read_open(file, *size, out),
            Body::Stored { id, .. } => object::get_to(self.keys, self.kv, &ContentId(*id), out).map(drop),
        }
    }
}

/// Stores `body` unless the store holds it already, packed as it is read (see the module
/// docs: the caller holds the objects lock shared until a committed record names it).
/// A held body is stored whole (it is small); a stored one is only looked up.
///
/// # Errors
/// `conflict` if an open file changed while it was read; `io`; `not-found` for a stored
/// body the store lacks.
pub(crate) fn keep(keys: &KeyRing, kv: &dyn KeyValueStore, body: &Body) -> Result<Kept> {
    let size = body.size();
    match body {
        Body::Stored { .. } => Ok(Kept { id: id(keys, body)?, size, class: class(kv, body)? }),
        Body::Held(bytes) => {
            let mut txn = kv.begin()?;
            let (id, class) = object::put(keys, &mut *txn, bytes)?;
            txn.commit()?;
            Ok(Kept { id, size, class })
        }
        Body::Open { file, size } => {
            let mut mac = keys.content_id_streaming(*size);
            let mut streamed = Packer::stream();
            let mut class = None;
            let read = body::read_open(file, *size, &mut |piece| {
                class.get_or_insert_with(|| ContentClass::of(piece));
                mac.update(piece);
                streamed.push(piece);
                if streamed.full_blocks() >= KEEP_BLOCKS {
                    store_pack(kv, &streamed.seal_full(keys)?)?;
                }
                Ok(())
            });
            let id = match read
                .and_then(|()| mac.finish().ok_or_else(|| Error::new(ErrorCode::Conflict, "a file changed while read")))
            {
                Ok(id) => ContentId(id),
                Err(e) => {
                    let _ = store_pack(kv, &streamed.abandon());
                    return Err(e);
                }
            };
            let known = object::exists(kv, &id)?;
            let class = class.unwrap_or(ContentClass::FileContent);
            store_pack(kv, &streamed.finish(keys, id, class, known)?)?;
            Ok(Kept { id, size: *size, class })
        }
    }
}

/// Keeps what `input` yields, at most `limit` bytes: packed as it is read (see [`keep`]),
/// refused as soon as the count passes `limit` (the blocks stored so far deleted again).
///
/// # Errors
/// `over-cap` (with the limit) past `limit`; `io` reading `input`.
pub(crate) fn keep_input(
    keys: &KeyRing,
    kv: &dyn KeyValueStore,
    input: &mut dyn std::io::Read,
    limit: u64,
) -> Result<Kept> {
    let mut streamed = Packer::stream();
    let mut head = Vec::new();
    let mut buf = vec![0u8; body::PIECE];
    let mut size = 0u64;
    let read = (|| -> Result<()> {
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::new(ErrorCode::Io, format!("reading the input: {e}")).with_source(e)),
            };
            size += n as u64;
            if size > limit {
                return Err(Error::new(
                    ErrorCode::OverCap,
                    format!("the input is over the limit of {limit} bytes; nothing was kept"),
                )
                .with_details(serde_json::json!({ "limit": limit })));
            }
            if head.len() < BINARY_SNIFF_LEN {
                head.extend_from_slice(&buf[..n.min(BINARY_SNIFF_LEN - head.len())]);
            }
            streamed.push(&buf[..n]);
            if streamed.full_blocks() >= KEEP_BLOCKS {
                store_pack(kv, &streamed.seal_full(keys)?)?;
            }
        }
    })();
    if let Err(e) = read {
        let _ = store_pack(kv, &streamed.abandon());
        return Err(e);
    }
    // The id needs the length first: a second pass over what was just packed, block by block.
    let (id, class) = (streamed_id(keys, kv, &streamed, size)?, ContentClass::of(&head));
    let known = object::exists(kv, &id)?;
    store_pack(kv, &streamed.finish(keys, id, class, known)?)?;
    Ok(Kept { id, size, class })
}

fn streamed_id(
    keys: &KeyRing,
    kv: &dyn KeyValueStore,
    streamed: &crate::storage::pack::Streamed,
    size: u64,
) -> Result<ContentId> {
    let mut mac = keys.content_id_streaming(size);
    streamed.replay(keys, kv, &mut |piece| {
        mac.update(piece);
        Ok(())
    })?;
    mac.finish().map(ContentId).ok_or_else(|| Error::corrupt("kept input", "its size changed"))
}

fn store_pack(kv: &dyn KeyValueStore, pack: &SealedPack) -> Result<()> {
    let mut txn = kv.begin()?;
    pack.store(&mut *txn)?;
    txn.commit()
}
