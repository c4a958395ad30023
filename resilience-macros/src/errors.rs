//! Collecting every error of one expansion, to report them all at once.

/// A list of errors that becomes one combined [`syn::Error`].
#[derive(Default)]
pub(crate) struct Errors {
    combined: Option<syn::Error>,
    len: usize,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.len += 1;
        match &mut self.combined {
            Some(combined) => combined.combine(error),
            None => self.combined = Some(error),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The combined error, or `None` when nothing went wrong.
    pub(crate) fn finish(self) -> Option<syn::Error> {
        self.combined
    }
}
