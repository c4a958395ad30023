//! `std::sync` in builds, `loom::sync` in the loom model test.

#[cfg(loom)]
pub(crate) use loom::sync::{
    Arc, RwLock,
    atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering},
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    Arc, RwLock,
    atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering},
};

#[cfg(loom)]
pub(crate) use once_box::OnceBox;
#[cfg(not(loom))]
pub(crate) use once_cell::race::OnceBox;

/// once_cell's `OnceBox` on loom's atomics, with the same orderings: an
/// `Acquire` load to read it, a `Release`/`Acquire` exchange to set it, the
/// loser of a race dropping its box.
#[cfg(loom)]
#[allow(unsafe_code)] // a pointer to a leaked `Box`, freed only by `Drop`
mod once_box {
    use loom::sync::atomic::{AtomicPtr, Ordering::*};
    use std::ptr;

    #[derive(Debug)]
    pub(crate) struct OnceBox<T> {
        inner: AtomicPtr<T>,
    }

    // As once_cell's: the box is shared and moved between threads.
    unsafe impl<T: Sync + Send> Sync for OnceBox<T> {}

    impl<T> OnceBox<T> {
        pub(crate) fn new() -> Self {
            OnceBox {
                inner: AtomicPtr::new(ptr::null_mut()),
            }
        }

        pub(crate) fn with_value(value: Box<T>) -> Self {
            OnceBox {
                inner: AtomicPtr::new(Box::into_raw(value)),
            }
        }

        pub(crate) fn get(&self) -> Option<&T> {
            // SAFETY: null, or a box leaked by `get_or_init` that lives
            // until `drop`.
            unsafe { self.inner.load(Acquire).as_ref() }
        }

        pub(crate) fn get_or_init(&self, f: impl FnOnce() -> Box<T>) -> &T {
            if let Some(value) = self.get() {
                return value;
            }
            let new = Box::into_raw(f());
            match self
                .inner
                .compare_exchange(ptr::null_mut(), new, AcqRel, Acquire)
            {
                // SAFETY: ours, leaked just above, now owned by `self`.
                Ok(_) => unsafe { &*new },
                Err(old) => {
                    // SAFETY: `new` was never shared; `old` is the winner's.
                    drop(unsafe { Box::from_raw(new) });
                    unsafe { &*old }
                }
            }
        }
    }

    impl<T> Drop for OnceBox<T> {
        fn drop(&mut self) {
            self.inner.with_mut(|ptr| {
                if !ptr.is_null() {
                    // SAFETY: the box leaked by `get_or_init`, dropped once.
                    drop(unsafe { Box::from_raw(*ptr) });
                }
            });
        }
    }
}
