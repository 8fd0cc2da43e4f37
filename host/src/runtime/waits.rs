//! # A stop wakes a guest that waits, if it checks for stops
//!
//! Epochs do not interrupt a guest parked in a host wait (`wasi:io/poll`'s `poll`, a
//! pollable's `block`: a sleep, a wait for a stream). Without help, a cooperative guest
//! sleeping between steps would notice a cancel only when its sleep ends, or be dropped at
//! the end of its grace period without returning. So these two functions are shadowed: each
//! waits as wasmtime-wasi's does, or until the call is asked to stop, and then returns at
//! once as if every pollable it waits on were ready (a sleep ends early). The guest's next
//! `cancelled()` is true, and it returns within milliseconds of the cancel; a guest that
//! waits again at once returns again at once.
//!
//! Only for a guest that checks: one that has asked `cancelled()` or `time-left()` in
//! this call. A guest that never checks would take an early end of its sleep for the
//! time having passed and carry on (the example `order_book` would order the book it was
//! told to drop); its waits run their course, and the hard stop after the grace period
//! ends it, as before.
//!
//! **A poll's list is charged to the call** while it waits ([`POLL_ENTRY_BYTES`] an entry,
//! against `host_memory_bytes`): wasmtime lifts it into host memory, with a borrow record
//! per entry, and wasmtime-wasi keeps an index per entry besides, for the whole wait. A
//! list may name one pollable any number of times, so only wasmtime's cap on a store's
//! live handles (100,000; an entry lent counts twice) bounded its length: about 50,000
//! entries, some 3 MiB a call held uncharged for as long as the wait lasted. Refused, the
//! guest traps.

use wasmtime::component::{Linker, Resource};
use wasmtime::{Result, StoreContextMut};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::io::poll::{Host as _, HostPollable as _};

use super::guest::GuestState;

/// The `wasi:io/poll` instance wasmtime-wasi 48 defines (older 0.2 imports resolve to it).
const POLL: &str = "wasi:io/poll@0.2.12";

/// What one entry of a poll's list holds of host memory while it waits: the lifted
/// handle (16 bytes), its borrow record, and wasmtime-wasi's index of it and its place in
/// the answer, with their vectors' spare room.
const POLL_ENTRY_BYTES: usize = 64;

/// Put the stop in front of every wait a guest can park in.
pub(crate) fn wake_waits_on_stop(linker: &mut Linker<GuestState>) -> Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(POLL)?;
    poll.func_wrap_async(
        "poll",
        |mut store: StoreContextMut<'_, GuestState>, (pollables,): (Vec<Resource<DynPollable>>,)| {
            Box::new(async move {
                let entries = pollables.len();
                // What the guest dropped gives its charge back first.
                store.data_mut().settle_table_charges();
                let _charge =
                    store.data().ledger().hold_memory(entries.saturating_mul(POLL_ENTRY_BYTES)).map_err(
                        |refusal| {
                            wasmtime::format_err!("{refusal}: the guest polls a list of {entries} pollables")
                        },
                    )?;
                let every = || (0..entries as u32).collect::<Vec<u32>>();
                let control = store.data().control();
                if !control.checks_for_stop() {
                    return Ok((store.data_mut().table().poll(pollables).await?,));
                }
                let mut stop = control.stop_signal();
                if *stop.borrow_and_update() {
                    return Ok((every(),));
                }
                let table = store.data_mut().table();
                tokio::select! {
                    ready = table.poll(pollables) => Ok((ready?,)),
                    _ = stop.wait_for(|stopping| *stopping) => Ok((every(),)),
                }
            })
        },
    )?;
    poll.func_wrap_async(
        "[method]pollable.block",
        |mut store: StoreContextMut<'_, GuestState>, (pollable,): (Resource<DynPollable>,)| {
            Box::new(async move {
                let control = store.data().control();
                if !control.checks_for_stop() {
                    return store.data_mut().table().block(pollable).await;
                }
                let mut stop = control.stop_signal();
                if *stop.borrow_and_update() {
                    return Ok(());
                }
                let table = store.data_mut().table();
                tokio::select! {
                    ready = table.block(pollable) => ready,
                    _ = stop.wait_for(|stopping| *stopping) => Ok(()),
                }
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
