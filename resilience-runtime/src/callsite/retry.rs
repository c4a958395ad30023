//! Retry sites: the `static` each `#[retry]` fn holds, which resolves its
//! name, policy and labels once, and the start of each call's chain.
//!
//! The chain itself, the loop on the runtime's `Attempts`, is
//! `retry/chain.rs`, beside the runtime's other loops; this file gives it
//! its site (policy and name behind one pointer) and its call's scope.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::OnceLock;

use crate::registry::{self, Defaults, LimitRate, Site, SiteDefaults};
use crate::retry::chain::{Chain, Named, Scope};
use crate::retry::{
    ByClassify, Classify, Event, FromRuntimeError, KeepLast, Policy, PolicyBuilder, Reason,
};
use crate::telemetry::{CallScope, Entered, Labels, Status};

/// The retry policy of one `#[retry]` call site.
#[derive(Debug)]
pub struct RetrySite {
    name: &'static str,
    /// `name` is `module::fn`, to which the type of the impl the fn is in
    /// is added when the call names it.
    default_name: bool,
    /// The fn is a method: a default name gets its impl's type.
    in_impl: bool,
    /// The breaker around the chain, whose name is the `target` of every
    /// series of the call.
    target: Option<&'static str>,
    /// The retry budget its chains draw on: the attribute's `budget`, or
    /// the breaker's name.
    budget: Option<&'static str>,
    /// The load limiter each attempt takes a slot of: the attribute's
    /// `limit`, declared here so that `install()` knows its name.
    limit: Option<&'static str>,
    /// The rate limit the attribute declares for `limit`, if any.
    limit_rate: Option<LimitRate>,
    defaults: PolicyBuilder,
    /// The name, policy and labels, resolved together on the first call:
    /// the registry's service label is fixed once the global registry
    /// exists, so caching it here cannot go stale.
    resolved: OnceLock<Resolved>,
}

/// What a [`RetrySite`] resolved on its first call. A chain holds one
/// pointer to it, through which it reaches both its policy and its name.
#[derive(Debug)]
pub struct Resolved {
    name: &'static str,
    policy: Policy,
    labels: Labels,
}

impl std::borrow::Borrow<Policy> for &'static Resolved {
    #[inline(always)]
    fn borrow(&self) -> &Policy {
        &self.policy
    }
}

impl Named for &'static Resolved {
    #[inline(always)]
    fn name(&self) -> &'static &'static str {
        let resolved: &'static Resolved = self;
        &resolved.name
    }
}

/// A chain's call, reported where every protected call is: its span, its
/// attempts (`http_client_retries_total`, `dependency_errors_total`) and
/// its duration.
impl Scope for CallScope {
    type Entered = Entered;

    #[inline(always)]
    fn is_quiet(&self) -> bool {
        CallScope::is_quiet(self)
    }

    #[inline(always)]
    fn enter(&self) -> Entered {
        CallScope::enter(self)
    }

    #[inline(always)]
    fn attempt<E>(&self, event: &Event<'_, E>, reason: Option<Reason>) {
        CallScope::attempt(self, event, |_| reason);
    }

    #[inline(always)]
    fn succeed(&self, attempt: u32) {
        CallScope::succeed(self, attempt);
    }

    #[inline(always)]
    fn fail(&self, reason: Option<Reason>) {
        self.finish(Status::failed(reason));
    }
}

/// The type of the impl a protected method is in, for its site's default
/// name: `|| Some(core::any::type_name::<Self>())` in a method, `|| None`
/// in a free fn. A closure, not a `fn` pointer: it costs the call nothing
/// until the site resolves.
pub trait Owner: FnOnce() -> Option<&'static str> {}

impl<F: FnOnce() -> Option<&'static str>> Owner for F {}

/// The owner of a free fn, or of a lookup that does not resolve.
#[inline(always)]
fn no_owner() -> Option<&'static str> {
    None
}

impl RetrySite {
    /// A site named `name` whose attribute asked for `defaults` (checked at
    /// compile time).
    pub const fn new(name: &'static str, defaults: PolicyBuilder) -> Self {
        Self {
            name,
            default_name: false,
            in_impl: false,
            target: None,
            budget: None,
            limit: None,
            limit_rate: None,
            defaults,
            resolved: OnceLock::new(),
        }
    }

    /// The same site, whose name `module::fn` was not given: a method's
    /// site is named `module::Type::fn`, so that `Users::get` and
    /// `Orders::get` keep their own policies and series.
    pub const fn with_default_name(mut self) -> Self {
        self.default_name = true;
        self
    }

    /// The same site, for a method: listed before its first call as
    /// `module::fn`, named `module::Type::fn` once it runs.
    pub const fn in_impl(mut self) -> Self {
        self.in_impl = true;
        self
    }

    /// The same site, inside the breaker `breaker`: its metrics carry the
    /// breaker's name as `target`, as the breaker's own do, so that every
    /// series of one dependency joins on one label.
    pub const fn with_target(mut self, breaker: &'static str) -> Self {
        self.target = Some(breaker);
        self
    }

    /// The same site, whose retries draw on the registry's budget `budget`
    /// (by default, the breaker's name given to [`with_target`](Self::with_target)).
    pub const fn with_budget(mut self, budget: &'static str) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The same site, whose attempts take a slot of the load limiter
    /// `limit` (through a [`LimitSite`](super::LimitSite) of that name).
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

    /// The site's name: the attribute's `name`, or the fn's path (with its
    /// impl's type once a call resolved it).
    pub fn name(&'static self) -> &'static str {
        self.resolve(no_owner).name
    }

    /// The labels of its metrics: the registry's service, the site's name.
    #[inline]
    pub fn labels(&'static self) -> Labels {
        self.resolve(no_owner).labels
    }

    /// The policy in force: resolved on the first call from the global
    /// registry (the config file, then the code, then the attribute).
    #[inline]
    pub fn policy(&'static self) -> Policy {
        self.resolve(no_owner).policy
    }

    #[inline]
    fn resolve(&'static self, owner: impl Owner) -> &'static Resolved {
        self.resolved.get_or_init(|| {
            // Before the registry's lookup: a method's policy is checked
            // against the sites known then, this one among them.
            registry::site_ran(self);
            let name = match (self.default_name, owner()) {
                (true, Some(owner)) => owned_name(self.name, owner),
                _ => self.name,
            };
            let registry = registry::global();
            let mut policy = if name == self.name {
                registry.policy(name, self.defaults)
            } else {
                registry.method_policy(self.name, name, self.defaults)
            };
            if let Some(budget) = self.budget.or(self.target) {
                policy = policy.with_budget(registry.budget(budget));
            }
            Resolved {
                name,
                policy,
                labels: Labels::new(registry.service(), self.target.unwrap_or(name)),
            }
        })
    }
}

impl Site for RetrySite {
    fn describe(&self) -> SiteDefaults {
        SiteDefaults {
            name: self.name,
            in_impl: self.default_name && self.in_impl,
            budget: self.budget.or(self.target),
            limit: self.limit,
            limit_rate: self.limit_rate,
            config: Defaults::Retry(self.defaults),
            at: None,
        }
    }
}

/// `module::fn` in the impl of `ty` (`path::Type<Args>`): `module::Type::fn`.
/// Leaked once per site, on its first call.
#[cold]
fn owned_name(name: &'static str, ty: &str) -> &'static str {
    let ty = ty.split('<').next().unwrap_or(ty);
    let ty = ty.rsplit("::").next().unwrap_or(ty);
    match name.rsplit_once("::") {
        Some((module, function)) => {
            Box::leak(format!("{module}::{ty}::{function}").into_boxed_str())
        }
        None => name,
    }
}

/// The chain of one call at a `#[retry]` site.
pub type SiteChain<W> = Chain<W, &'static Resolved, CallScope>;

// The expansion of a `#[retry]` without `when` runs its attempts through
// these, whose bounds name the error type's own traits: an error type
// without `Classify` is then reported once, at the user's type, with the
// trait's message, rather than a second time as `ByClassify: Classifier<E>`.
impl SiteChain<ByClassify> {
    /// [`Chain::attempt`], classified by the error's [`Classify`] impl.
    #[inline]
    pub fn attempt_classified<Fut, T, E>(
        &mut self,
        attempt: Fut,
    ) -> impl Future<Output = ControlFlow<Result<T, E>>>
    where
        Fut: Future<Output = Result<T, E>>,
        E: Classify + FromRuntimeError,
    {
        self.attempt(attempt)
    }
}

impl SiteChain<KeepLast<ByClassify>> {
    /// [`Chain::attempt`], classified by the error's [`Classify`] impl,
    /// keeping each failed attempt's error.
    #[inline]
    pub fn attempt_classified<Fut, T, E>(
        &mut self,
        attempt: Fut,
    ) -> impl Future<Output = ControlFlow<Result<T, E>>>
    where
        Fut: Future<Output = Result<T, E>>,
        E: Classify + FromRuntimeError + std::error::Error + Send + Sync + 'static,
    {
        self.attempt(attempt)
    }
}

/// Starts a chain at `site` (in the impl of `owner`, for a method),
/// classifying errors with `when`: [`ByClassify`](crate::retry::ByClassify)
/// or the attribute's `when`, wrapped in a
/// [`KeepLast`](crate::retry::KeepLast) by [`Probe`](super::Probe) when the
/// error type can be kept as the cause of a later runtime error.
// The probe wraps the classifier before the chain is built, so that it is
// built once: a chain rebuilt around a new keeper measured 3 instructions
// more per call.
#[inline]
pub fn retry<W>(site: &'static RetrySite, owner: impl Owner, when: W) -> SiteChain<W> {
    let resolved = site.resolve(owner);
    Chain::new(resolved, when, CallScope::new(resolved.labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::deadline;
    use crate::retry::{ByClassify, Classify, HttpStatus, Verdict};
    use std::cell::Cell;
    use std::ops::ControlFlow;
    use std::time::Duration;
    use tokio::time::Instant;

    #[derive(Debug, Clone, PartialEq)]
    enum Failure {
        Status(u16),
        Runtime(Error),
    }

    impl From<Error> for Failure {
        fn from(err: Error) -> Self {
            Failure::Runtime(err)
        }
    }

    impl Classify for Failure {
        fn classify(&self) -> Verdict {
            match self {
                Failure::Status(429) => {
                    HttpStatus(429).with_retry_after(Some(Duration::from_secs(10)))
                }
                Failure::Status(code) => HttpStatus(*code).classify(),
                Failure::Runtime(err) => err.classify(),
            }
        }
    }

    /// One scripted attempt.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        Status(u16),
        Hang,
        Slow(u64, u16),
    }

    async fn step(script: &[Step], calls: &Cell<usize>) -> Result<u32, Failure> {
        let step = script
            .get(calls.get())
            .copied()
            .unwrap_or(Step::Status(200));
        calls.set(calls.get() + 1);
        let status = match step {
            Step::Status(status) => status,
            Step::Hang => std::future::pending().await,
            Step::Slow(secs, status) => {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                status
            }
        };
        match status {
            200 => Ok(7),
            code => Err(Failure::Status(code)),
        }
    }

    async fn by_chain(site: &'static RetrySite, script: &[Step]) -> (Result<u32, Failure>, usize) {
        let calls = Cell::new(0);
        let mut chain = retry(site, no_owner, ByClassify);
        let result = loop {
            match chain.attempt(step(script, &calls)).await {
                ControlFlow::Break(result) => break result,
                ControlFlow::Continue(()) => {}
            }
        };
        (result, calls.get())
    }

    async fn by_runtime(policy: Policy, script: &[Step]) -> (Result<u32, Failure>, usize) {
        let calls = Cell::new(0);
        let result = policy.retry(|| step(script, &calls)).await;
        (result, calls.get())
    }

    static HTTP: RetrySite = RetrySite::new("callsite.http", PolicyBuilder::http());
    static TIMEOUT: RetrySite = RetrySite::new(
        "callsite.timeout",
        PolicyBuilder::http().with_attempt_timeout(Duration::from_secs(1)),
    );
    static SHORT: RetrySite = RetrySite::new(
        "callsite.short",
        PolicyBuilder::http()
            .with_max_attempts(5)
            .with_max_elapsed(Duration::from_secs(2)),
    );

    /// A site, a script, a deadline in ms, the outcome, the attempts made.
    type Case = (
        &'static RetrySite,
        &'static [Step],
        Option<u64>,
        Result<u32, Failure>,
        usize,
    );

    /// The chain re-implements the runtime executor's rules for a loop the
    /// expansion drives; both must agree on every outcome.
    #[tokio::test(start_paused = true)]
    async fn the_chain_agrees_with_the_runtime_executor() {
        use Step::*;
        let cases: &[Case] = &[
            (
                &HTTP,
                &[Status(502), Status(502), Status(200)],
                None,
                Ok(7),
                3,
            ),
            (&HTTP, &[Status(400)], None, Err(Failure::Status(400)), 1),
            (&HTTP, &[Status(503); 3], None, Err(Failure::Status(503)), 3),
            (&HTTP, &[Status(429)], None, Err(Failure::Status(429)), 1),
            (&TIMEOUT, &[Hang, Status(200)], None, Ok(7), 2),
            (
                &SHORT,
                &[Slow(3, 200)],
                None,
                Err(Failure::Runtime(Error::max_elapsed_exceeded(
                    Duration::from_secs(2),
                    1,
                ))),
                1,
            ),
            (
                &HTTP,
                &[Status(503); 3],
                Some(50),
                Err(Failure::Runtime(Error::deadline_exceeded(1))),
                1,
            ),
            (
                &HTTP,
                &[Hang],
                Some(0),
                Err(Failure::Runtime(Error::deadline_exceeded(0))),
                0,
            ),
        ];
        for (site, script, deadline_ms, expected, calls) in cases {
            let (chain, runtime) = match deadline_ms {
                None => (
                    by_chain(site, script).await,
                    by_runtime(site.policy(), script).await,
                ),
                Some(ms) => {
                    let within = Duration::from_millis(*ms);
                    (
                        deadline::with_timeout(within, by_chain(site, script)).await,
                        deadline::with_timeout(within, by_runtime(site.policy(), script)).await,
                    )
                }
            };
            assert_eq!(chain, runtime, "{script:?}");
            assert_eq!(chain, (expected.clone(), *calls), "{script:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_attempt_is_cut_at_the_deadline() {
        let start = Instant::now();
        let (result, calls) = deadline::with_timeout(
            Duration::from_millis(500),
            by_chain(&TIMEOUT, &[Step::Hang]),
        )
        .await;
        assert_eq!(result, Err(Failure::Runtime(Error::deadline_exceeded(1))));
        assert_eq!((calls, start.elapsed()), (1, Duration::from_millis(500)));
    }
}
