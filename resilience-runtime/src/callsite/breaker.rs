//! Breaker sites: the `static` each `#[circuit_breaker]` fn holds, which
//! resolves its breaker (or, with `key`, its family) once, and the calls
//! through it: admitted and settled around a retry chain, or one call
//! through the breaker's own future for a fn without `#[retry]`.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

use crate::breaker::{
    BreakerConfig, BreakerFamily, CircuitBreaker, FamilyConfig, FamilyKey, Permit,
};
use crate::registry::{self, Defaults, LimitRate, Site, SiteDefaults};
use crate::retry::{Classify, FromRuntimeError};
use crate::telemetry::{self, CallScope, Labels, Status};
use crate::{DependencyDown, Error};

/// What a `#[circuit_breaker]` call site resolves: one breaker
/// ([`BreakerConfig`]), or with `key` a family of them ([`FamilyConfig`]).
pub trait SiteKind: Copy + std::fmt::Debug + Send + Sync + 'static {
    /// The breaker or the family.
    type Target: std::fmt::Debug + Sync + 'static;
    /// The one of `registry` named `name`, created with `defaults` if new,
    /// for the site at `at`.
    fn resolve(
        self,
        registry: &'static registry::Registry,
        name: &'static str,
        at: &'static std::panic::Location<'static>,
    ) -> &'static Self::Target;
    /// The attribute's values, for the registry's list of sites.
    fn declared(self) -> Defaults;
}

impl SiteKind for BreakerConfig {
    type Target = CircuitBreaker;

    fn resolve(
        self,
        registry: &'static registry::Registry,
        name: &'static str,
        at: &'static std::panic::Location<'static>,
    ) -> &'static CircuitBreaker {
        registry.site_breaker(name, self, at)
    }

    fn declared(self) -> Defaults {
        Defaults::Breaker(self)
    }
}

impl SiteKind for FamilyConfig {
    type Target = BreakerFamily;

    fn resolve(
        self,
        registry: &'static registry::Registry,
        name: &'static str,
        at: &'static std::panic::Location<'static>,
    ) -> &'static BreakerFamily {
        registry.site_family(name, self, at)
    }

    fn declared(self) -> Defaults {
        Defaults::Family(self)
    }
}

/// The circuit breaker of one `#[circuit_breaker]` call site, or with
/// `key` its family ([`FamilySite`]).
#[derive(Debug)]
pub struct BreakerSite<C: SiteKind = BreakerConfig> {
    pub(super) name: &'static str,
    defaults: C,
    /// Where the attribute is written, for an error naming the site.
    at: &'static std::panic::Location<'static>,
    /// The load limiter each call takes a slot of, without a `#[retry]`
    /// below: the attribute's `limit`, declared so that `install()` knows
    /// its name.
    limit: Option<&'static str>,
    /// The rate limit the attribute declares for `limit`, if any.
    limit_rate: Option<LimitRate>,
    /// The breaker and the labels, resolved together (see
    /// [`RetrySite`](super::RetrySite)).
    resolved: OnceLock<(&'static C::Target, Labels)>,
    /// Calls answered by the fallback.
    pub(super) fallbacks: AtomicU64,
}

/// The breaker family of one `#[circuit_breaker(key = …)]` call site.
pub type FamilySite = BreakerSite<FamilyConfig>;

impl<C: SiteKind> BreakerSite<C> {
    /// A site for the breaker (or family) `name`, whose attribute asked
    /// for `defaults` (checked at compile time). Called in the attribute's
    /// expansion, whose location it keeps.
    #[track_caller]
    pub const fn new(name: &'static str, defaults: C) -> Self {
        Self {
            name,
            defaults,
            at: std::panic::Location::caller(),
            limit: None,
            limit_rate: None,
            resolved: OnceLock::new(),
            fallbacks: AtomicU64::new(0),
        }
    }

    /// The same site, whose calls take a slot of the load limiter `limit`
    /// (through a [`LimitSite`](super::LimitSite) of that name).
    pub const fn with_limit(mut self, limit: &'static str) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The same site, declaring the rate limit of its `limit`
    /// (`rate = "100/s", burst = 20`), which the registry checks against
    /// every other site of that limiter when it is built.
    pub const fn with_limit_rate(mut self, rate: LimitRate) -> Self {
        self.limit_rate = Some(rate);
        self
    }

    /// The breaker (or family), shared by every site with the same name:
    /// resolved on the first call from the global registry.
    #[inline]
    pub fn get(&'static self) -> &'static C::Target {
        self.resolve().0
    }

    #[inline]
    fn resolve(&'static self) -> (&'static C::Target, Labels) {
        *self.resolved.get_or_init(|| {
            registry::site_ran(self);
            let registry = registry::global();
            (
                self.defaults.resolve(registry, self.name, self.at),
                Labels::new(registry.service(), self.name),
            )
        })
    }

    /// How many calls at this site were answered by the fallback.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<C: SiteKind> Site for BreakerSite<C> {
    fn describe(&self) -> SiteDefaults {
        SiteDefaults {
            name: self.name,
            in_impl: false,
            budget: None,
            limit: self.limit,
            limit_rate: self.limit_rate,
            config: self.defaults.declared(),
            at: Some(self.at),
        }
    }
}

/// The breaker of one call at a [`FamilySite`]: its key's member, taken
/// for the call only, so that a member no call uses stays evictable.
#[derive(Debug)]
pub struct Member {
    breaker: CircuitBreaker,
    labels: Labels,
}

/// The member of the site's family for `key`.
#[inline]
pub fn member<K: FamilyKey + ?Sized>(site: &'static FamilySite, key: &K) -> Member {
    let (family, labels) = site.resolve();
    Member {
        breaker: key.with_key(|key| family.get(key)),
        labels,
    }
}

/// [`breaker`] for a member of a family.
pub fn member_call<Fut, T, E>(member: &Member, call: Fut) -> impl Future<Output = Result<T, E>>
where
    Fut: Future<Output = Result<T, E>>,
    E: Classify + FromRuntimeError,
{
    telemetry::observe(member.labels, member.breaker.call(call))
}

/// [`admit`] for a member of a family.
#[inline]
pub fn admit_member(member: &Member) -> Result<Permit<'_>, DependencyDown> {
    member.breaker.try_acquire()
}

/// One call through the site's breaker, for a fn without `#[retry]`.
#[inline]
///
/// Observed as the logical call: its span and duration, a rejection
/// included.
///
/// An opaque future, like a chain's attempt.
pub fn breaker<Fut, T, E>(
    site: &'static BreakerSite,
    call: Fut,
) -> impl Future<Output = Result<T, E>>
where
    Fut: Future<Output = Result<T, E>>,
    E: Classify + FromRuntimeError,
{
    let (breaker, labels) = site.resolve();
    telemetry::observe(labels, breaker.call(call))
}

/// Asks the site's breaker for one logical call (the whole retry chain
/// inside counts once). Dropping the permit without settling it counts
/// nothing: the call was cancelled.
#[inline]
pub fn admit(site: &'static BreakerSite) -> Result<Permit<'static>, DependencyDown> {
    site.get().try_acquire()
}

/// Records the call's outcome (classified by `E`) and passes it on.
#[inline]
pub fn settle<T, E: Classify>(permit: Permit<'_>, result: Result<T, E>) -> Result<T, E> {
    permit.record(&result);
    result
}

/// The caller's error for a call the breaker rejected.
#[inline]
pub fn reject<T, E: FromRuntimeError>(down: DependencyDown) -> Result<T, E> {
    rejected_call(down);
    Err(E::from_runtime(Error::DependencyDown(down)))
}

/// A rejected call is a logical call too: its span and its (zero)
/// duration, as `circuit_open`. The breaker counted the rejection.
pub(super) fn rejected_call(down: DependencyDown) {
    let scope = CallScope::new(Labels::of(down.breaker()));
    drop(scope.enter());
    scope.finish(Status::CircuitOpen);
}
