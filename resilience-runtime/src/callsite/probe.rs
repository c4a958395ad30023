//! What the expansion asks of the user's types, checked at compile time
//! at the user's span: that the error type classifies and carries the
//! runtime's errors, that by-value parameters can be copied for each
//! attempt, and whether the error type can be kept as the cause of a
//! later runtime error (chosen by autoref, since Rust has no
//! specialization).

use std::marker::PhantomData;

use crate::Error;
use crate::retry::{KeepLast, Verdict};

/// Chooses, at the call site, whether a chain keeps its failed attempts'
/// errors of type `E`, by autoref: `(&&Probe::<E>::NEW).keeping(when)` is
/// `when` in a [`KeepLast`] when `E` can be kept (a `std::error::Error +
/// Send + Sync + 'static`), `when` itself otherwise (with both
/// [`ProbeError`] and [`ProbeAny`] in scope).
#[derive(Debug)]
pub struct Probe<E>(PhantomData<fn() -> E>);

impl<E> Probe<E> {
    /// The probe of `E`.
    pub const NEW: Self = Probe(PhantomData);
}

/// The classifier of a chain whose error type can be kept.
pub trait ProbeError {
    /// `when`, keeping every failed attempt's error.
    fn keeping<W>(&self, when: W) -> KeepLast<W>;
}

impl<E: std::error::Error + Send + Sync + 'static> ProbeError for &Probe<E> {
    #[inline(always)]
    fn keeping<W>(&self, when: W) -> KeepLast<W> {
        KeepLast::new(when)
    }
}

/// The classifier of a chain whose error type cannot be kept.
pub trait ProbeAny {
    /// `when`, which keeps nothing.
    fn keeping<W>(&self, when: W) -> W;
}

impl<E> ProbeAny for Probe<E> {
    #[inline(always)]
    fn keeping<W>(&self, when: W) -> W {
        when
    }
}

/// The error type of a `Result`, for [`Probe`].
pub trait ResultError {
    /// `E` of `Result<T, E>`.
    type Error;
}

impl<T, E> ResultError for Result<T, E> {
    type Error = E;
}

/// Asks for `E: Classify` of a protected fn returning `R = Result<T, E>`,
/// through the trait's path (see the macros' `error_checks`).
#[inline(always)]
pub fn classified<R: ResultError>(_: fn(&R::Error) -> Verdict) {}

/// Asks for `E: FromRuntimeError` of a protected fn returning
/// `R = Result<T, E>`, through the trait's path.
#[inline(always)]
pub fn carries_runtime_errors<R: ResultError>(_: fn(Error) -> R::Error) {}

/// A parameter taken by value, which every attempt gets its own copy of.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is taken by value by a protected fn but is not `Clone`",
    label = "every attempt needs its own copy of this parameter",
    note = "take it by reference (`&{Self}`), or implement `Clone` for it (an `Arc` makes the copies cheap)"
)]
pub trait AttemptArg: Clone {}

impl<T: Clone> AttemptArg for T {}

/// The copy of a by-value parameter for one attempt.
#[inline(always)]
pub fn clone_arg<T: AttemptArg>(arg: &T) -> T {
    arg.clone()
}
