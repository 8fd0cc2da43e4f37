//! Tests only: the heap bytes each thread holds, counted by a global allocator that
//! forwards to the system's, so that a test can measure what a structure really keeps
//! (blocks sized as glibc's malloc hands them out: [`crate::cost::block`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|live| {
        live.set(live.get() + delta);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
    });
}

/// The bytes live on this thread now.
pub fn live() -> isize {
    LIVE.with(Cell::get)
}

/// The most bytes live at once on this thread since the last call, over what was live
/// then.
pub fn peak_since_last() -> isize {
    let (live, peak) = (LIVE.with(Cell::get), PEAK.with(Cell::get));
    PEAK.with(|cell| cell.set(live));
    peak - live
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(crate::cost::block(layout.size()) as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(crate::cost::block(layout.size()) as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        count(crate::cost::block(size) as isize - crate::cost::block(layout.size()) as isize);
        unsafe { System.realloc(ptr, layout, size) }
    }
}
