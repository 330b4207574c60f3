//! The allocation tracker: a global allocator that hands every request to the system
//! allocator and remembers, per thread, the largest single request since it was last
//! asked. The fuzz driver reads it after each input to catch a decoder that sizes an
//! allocation from a length field it has not checked.
//!
//! Invariants:
//! - It never changes what is allocated or where: every call goes to [`System`].
//! - It never allocates itself (a `const` thread-local `Cell` needs no registration), so
//!   it cannot recurse.
//! - Allocations by C code (zstd, SQLite) go through `malloc`, not here, and are not seen.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// Install in a test binary with
/// `#[global_allocator] static ALLOC: turnback_fuzz::Tracking = turnback_fuzz::Tracking;`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tracking;

fn note(size: usize) {
    // `try_with`: during thread teardown the slot may be gone; nothing to note then.
    let _ = LARGEST.try_with(|c| {
        if size > c.get() {
            c.set(size);
        }
    });
}

/// The largest single allocation this thread asked for since the last call (0 if none, or
/// if [`Tracking`] is not the global allocator).
pub fn take_largest() -> usize {
    LARGEST.try_with(|c| c.replace(0)).unwrap_or(0)
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; `note` only reads and writes a thread-local integer.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's, unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
