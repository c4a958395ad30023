//! The `#[retry]` and `#[circuit_breaker]` sites linked into the program,
//! gathered at link time so that the registry knows every name before the
//! first call.
//!
//! With the `site-list` feature (on by default), each attribute adds one
//! `static` to a linkme distributed slice: the linker collects them,
//! nothing runs at startup and nothing is added to a call. Supported where
//! linkme is: Linux, macOS, Windows, FreeBSD, OpenBSD and illumos.
//! Without the feature, or elsewhere (e.g. `wasm32`), the list is empty:
//! no config section can be checked against it, so
//! [`install`](super::install) does not refuse names, and a site is known
//! from its first call on (`ran`).

use std::fmt;

use crate::breaker::{BreakerConfig, FamilyConfig};
use crate::limit::{LimitConfig, Rate};
use crate::retry::{Policy, PolicyBuilder};

/// A site as the registry sees it; implemented by the facade's call-site
/// statics, never by hand.
#[doc(hidden)]
pub trait Site: Sync + fmt::Debug {
    /// The name and the attribute's values.
    fn describe(&self) -> SiteDefaults;
}

/// What one attribute declared.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct SiteDefaults {
    /// The attribute's `name`, or `module::fn` when none was given.
    pub name: &'static str,
    /// `name` is `module::fn` of a method: its policy is named
    /// `module::Type::fn`, with the impl's type, which is known only once
    /// the method runs.
    pub in_impl: bool,
    /// The retry budget the site's chains draw on, if any: the attribute's
    /// `budget`, or the name of the breaker around the chain.
    pub budget: Option<&'static str>,
    /// The load limiter the site's calls take their slots from, if any:
    /// the attribute's `limit`.
    pub limit: Option<&'static str>,
    /// The rate limit the attribute declares for that limiter, if any:
    /// its `rate` and `burst`.
    pub limit_rate: Option<LimitRate>,
    /// The attribute's values.
    pub config: Defaults,
    /// Where the attribute is written (a `#[circuit_breaker]`'s), for an
    /// error naming the site.
    pub at: Option<&'static std::panic::Location<'static>>,
}

/// `rate = "100/s", burst = 20` beside a site's `limit`: the rate limit
/// the attribute declares for its limiter, checked at compile time, and
/// where it is written.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct LimitRate {
    rate: Rate,
    /// `None`: the rate's count.
    burst: Option<u32>,
    at: &'static std::panic::Location<'static>,
}

impl LimitRate {
    /// The rate `rate` with `burst` (`None`: the rate's count), declared
    /// by the attribute this is expanded from.
    #[track_caller]
    pub const fn new(rate: Rate, burst: Option<u32>) -> Self {
        Self {
            rate,
            burst,
            at: std::panic::Location::caller(),
        }
    }

    /// The limiter's configuration: this rate limit alone.
    pub(crate) fn config(&self) -> LimitConfig {
        match self.burst {
            Some(burst) => LimitConfig::rate(self.rate).with_burst(burst),
            None => LimitConfig::rate(self.rate),
        }
    }

    /// The burst in force: the given one, or the rate's count.
    pub(crate) fn burst(&self) -> u32 {
        self.burst.unwrap_or(self.rate.count())
    }

    /// Whether two sites declare the same limit, wherever written.
    pub(crate) fn same(&self, other: &LimitRate) -> bool {
        self.rate == other.rate && self.burst() == other.burst()
    }

    /// The declared rate.
    pub(crate) fn rate(&self) -> Rate {
        self.rate
    }

    /// Where the attribute is written.
    pub(crate) fn at(&self) -> &'static std::panic::Location<'static> {
        self.at
    }
}

/// `rate = "100/s", burst = 20`, as the attribute writes them.
impl fmt::Display for LimitRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`rate = \"{}\"`", self.rate)?;
        match self.burst {
            Some(burst) => write!(f, ", `burst = {burst}`"),
            None => Ok(()),
        }
    }
}

/// The attribute's values of one site.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Defaults {
    /// A `#[retry]`.
    Retry(PolicyBuilder),
    /// A `#[circuit_breaker]`.
    Breaker(BreakerConfig),
    /// A `#[circuit_breaker(key = ..)]`: a breaker family.
    Family(FamilyConfig),
}

#[cfg(resilience_linked)]
mod linked {
    // linkme's own code: the sections the linker gathers the sites in.
    #[allow(unsafe_code)]
    #[linkme::distributed_slice]
    #[doc(hidden)]
    pub static SITES: [&'static dyn super::Site];
}

#[cfg(not(resilience_linked))]
mod linked {
    /// No link-time list (the `site-list` feature is off, or the target's
    /// linker does not gather the sections): no site is known before it
    /// runs.
    #[doc(hidden)]
    pub static SITES: [&'static dyn super::Site; 0] = [];
}

#[doc(hidden)]
pub use linked::SITES;

/// Adds the site `$site` to the registry's list, at link time: a `static`
/// the linker gathers, so no call pays for it. Expanded in the user's
/// crate, through the facade's paths.
#[cfg(resilience_linked)]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_register_site {
    ($entry:ident = $site:ident) => {
        #[::resilience::__private::linkme::distributed_slice(::resilience::__private::SITES)]
        #[linkme(crate = ::resilience::__private::linkme)]
        static $entry: &'static dyn ::resilience::__private::Site = &$site;
    };
}

/// No link-time list: the site is known from its first call on.
#[cfg(not(resilience_linked))]
#[doc(hidden)]
#[macro_export]
macro_rules! __resilience_register_site {
    ($entry:ident = $site:ident) => {};
}

/// Every site linked into the program, in no particular order.
pub(super) fn linked() -> impl Iterator<Item = SiteDefaults> {
    SITES.iter().map(|site| site.describe())
}

/// The sites that have run, in the order they first ran, when the linker
/// does not list them: what [`Registry::sites`](super::Registry::sites)
/// can still show.
#[cfg(not(resilience_linked))]
static RAN: std::sync::Mutex<Vec<&'static dyn Site>> = std::sync::Mutex::new(Vec::new());

/// Records that `site` resolved its configuration, on its first call.
/// Linked sites are in [`SITES`] already, so this costs them nothing.
#[inline]
pub(crate) fn ran(site: &'static dyn Site) {
    #[cfg(not(resilience_linked))]
    RAN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(site);
    #[cfg(resilience_linked)]
    let _ = site;
}

/// Every site the registry can know of: the linked ones, and without a
/// link-time list, those that have run so far.
pub(super) fn known() -> impl Iterator<Item = SiteDefaults> {
    #[cfg(not(resilience_linked))]
    let ran: Vec<SiteDefaults> = RAN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .map(|site| site.describe())
        .collect();
    #[cfg(resilience_linked)]
    let ran: Vec<SiteDefaults> = Vec::new();
    linked().chain(ran)
}

/// One protected call site and the configuration it runs with, from
/// [`Registry::sites`](super::Registry::sites).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SiteInfo {
    /// The name that config sections and metrics use. A method whose
    /// `#[retry]` has no `name` is listed as `module::fn`; its policy is
    /// looked up as `module::Type::fn`.
    pub name: &'static str,
    /// The configuration in force: the file over the code over the
    /// attribute.
    pub config: SiteConfig,
}

/// The effective configuration of one site.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SiteConfig {
    /// A `#[retry]` site's policy.
    Retry(Policy),
    /// A `#[circuit_breaker]` site's breaker.
    Breaker(BreakerConfig),
    /// A `#[circuit_breaker(key = ..)]` site's family.
    Family(FamilyConfig),
}

impl fmt::Display for SiteInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.config {
            SiteConfig::Retry(policy) => {
                write!(f, "[retry.{}] {policy:?}", super::toml_key(self.name))
            }
            SiteConfig::Breaker(config) => {
                write!(f, "[breakers.{}] {config:?}", super::toml_key(self.name))
            }
            SiteConfig::Family(config) => {
                write!(f, "[breakers.{}] {config:?}", super::toml_key(self.name))
            }
        }
    }
}
