//! Every fn shape `#[retry]` and `#[circuit_breaker]` support, compiled
//! under `#![deny(warnings)]`.
#![deny(warnings)]

use std::sync::Arc;

use resilience::{circuit_breaker, retry};
use resilience::{IdempotencyKey, retry::Verdict};

type Error = std::io::Error;

/// Free fn, visibility and docs kept.
#[retry(max = 3, initial = "100ms", multiplier = 2.0, max_interval = "2s", jitter = 0.25)]
pub async fn get_user(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[retry(preset = "background", max_elapsed = "1m", attempt_timeout = "10s")]
pub(crate) async fn list_jobs(mut page: u32) -> Result<u32, Error> {
    page += 1;
    Ok(page)
}

#[retry(preset = "db_tx", jitter = 0.3, idempotent)]
async fn transfer_funds(from: u64, to: u64) -> std::io::Result<u64> {
    Ok(from + to)
}

#[retry(method = "POST")]
async fn charge_card(#[idempotency_key] request_id: String, amount: u64) -> Result<u64, Error> {
    let _ = request_id;
    Ok(amount)
}

#[retry]
async fn send_email(key: &IdempotencyKey, to: &str) -> Result<usize, Error> {
    Ok(key.as_str().len() + to.len())
}

/// A verb that may create (`save_`, `store_`, `upsert_`, `set_`) compiles
/// with a key, or declared as a PUT when it only overwrites.
#[retry]
async fn save_payment(key: IdempotencyKey, cents: u64) -> Result<u64, Error> {
    Ok(key.as_str().len() as u64 + cents)
}

#[retry(method = "PUT")]
async fn upsert_user(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[retry(method = "GET", name = "user-service.lookup")]
async fn user_by_name(name: &str) -> Result<usize, Error> {
    if name.is_empty() {
        return Err(Error::other("empty"));
    }
    Ok(name.len())
}

fn retry_on_interrupt(error: &Error) -> Verdict {
    match error.kind() {
        std::io::ErrorKind::Interrupted => Verdict::Transient,
        _ => Verdict::Permanent,
    }
}

#[retry(when = retry_on_interrupt)]
async fn read_config(path: impl AsRef<str> + Clone) -> Result<usize, Error> {
    Ok(path.as_ref().len())
}

#[retry]
async fn get_generic<T, K>(items: Vec<T>, key: K) -> Result<Option<T>, Error>
where
    T: Clone + Send + 'static,
    K: Into<usize> + Clone,
{
    Ok(items.get(key.into()).cloned())
}

#[retry]
async fn find_first<'a>(haystack: &'a [u8], needle: u8) -> Result<Option<&'a u8>, Error> {
    Ok(haystack.iter().find(|b| **b == needle))
}

struct Client {
    base: String,
    calls: u32,
}

impl Client {
    #[retry]
    async fn get_base(&self) -> Result<&str, Error> {
        Ok(&self.base)
    }

    #[retry]
    async fn put_counter(&mut self, by: u32) -> Result<u32, Error> {
        self.calls += by;
        Ok(self.calls)
    }

    #[retry]
    async fn get_shared(self: Arc<Self>) -> Result<usize, Error> {
        Ok(self.base.len())
    }

    #[retry]
    async fn get_owned(self) -> Result<String, Error>
    where
        Self: Clone,
    {
        Ok(self.base)
    }
}

impl Clone for Client {
    fn clone(&self) -> Self {
        Client {
            base: self.base.clone(),
            calls: self.calls,
        }
    }
}

trait Users {
    async fn get_user(&self, id: u64) -> Result<u64, Error>;
}

impl Users for Client {
    #[retry(max = 2)]
    async fn get_user(&self, id: u64) -> Result<u64, Error> {
        Ok(id + u64::from(self.calls))
    }
}

#[retry]
#[tracing::instrument(level = "debug")]
async fn get_traced(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[circuit_breaker(name = "user", ratio = 0.5, min = 20)]
#[retry(max = 3, initial = "100ms")]
async fn get_user_protected(id: u64) -> Result<u64, Error> {
    std::future::ready(Ok(id)).await
}

#[circuit_breaker(
    name = "payments",
    preset = "critical",
    window = "30s",
    cooldown = "10s",
    half_open = 2,
    slow_call(threshold = "2s", ratio = 0.8)
)]
#[resilience::retry(method = "POST", preset = "http")]
#[tracing::instrument(skip(key))]
async fn pay(key: IdempotencyKey, amount: u64) -> Result<u64, Error> {
    let _ = key;
    std::future::ready(Ok(amount)).await
}

#[circuit_breaker(name = "thumbnails", preset = "relaxed", fallback = placeholder)]
async fn render_thumbnail(id: u64, size: &str) -> Result<String, Error> {
    std::future::ready(Ok(format!("{id}@{size}"))).await
}

async fn placeholder(id: u64, size: &str, _: Error) -> Result<String, Error> {
    Ok(format!("placeholder {id}@{size}"))
}

impl Client {
    #[circuit_breaker(name = "user", fallback = Self::get_cached)]
    #[retry]
    async fn get_name(&mut self, id: u64) -> Result<String, Error> {
        self.calls += 1;
        std::future::ready(Ok(format!("{}/{id}", self.base))).await
    }

    async fn get_cached(&mut self, id: u64, _: Error) -> Result<String, Error> {
        Ok(format!("cached/{id}"))
    }
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let client = Client {
        base: "http://127.0.0.1".to_owned(),
        calls: 0,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        assert_send(&get_user(1));
        assert_send(&charge_card(String::new(), 1));
        assert_send(&read_config("x"));
        assert_eq!(get_user(1).await.unwrap(), 1);
        assert_eq!(list_jobs(1).await.unwrap(), 2);
        assert_eq!(transfer_funds(1, 2).await.unwrap(), 3);
        assert_eq!(charge_card("k".into(), 5).await.unwrap(), 5);
        assert_eq!(send_email(&IdempotencyKey::new(), "a").await.unwrap(), 37);
        assert_eq!(save_payment(IdempotencyKey::new(), 1).await.unwrap(), 37);
        assert_eq!(upsert_user(7).await.unwrap(), 7);
        assert_eq!(user_by_name("ada").await.unwrap(), 3);
        assert!(user_by_name("").await.is_err());
        assert_eq!(read_config("abc").await.unwrap(), 3);
        assert_eq!(get_generic(vec![1u8, 2], 1u8).await.unwrap(), Some(2));
        assert_eq!(find_first(b"abc", b'b').await.unwrap(), Some(&b'b'));
        assert_eq!(client.get_base().await.unwrap(), "http://127.0.0.1");
        assert_eq!(Users::get_user(&client, 1).await.unwrap(), 1);
        assert_eq!(Arc::new(client.clone()).get_shared().await.unwrap(), 16);
        let mut client = client;
        assert_eq!(client.put_counter(2).await.unwrap(), 2);
        assert_eq!(get_traced(4).await.unwrap(), 4);
        assert_send(&get_user_protected(1));
        assert_send(&pay(IdempotencyKey::new(), 1));
        assert_eq!(get_user_protected(5).await.unwrap(), 5);
        assert_eq!(pay(IdempotencyKey::new(), 9).await.unwrap(), 9);
        assert_eq!(render_thumbnail(1, "s").await.unwrap(), "1@s");
        assert_eq!(client.get_name(3).await.unwrap(), "http://127.0.0.1/3");
        assert_eq!(client.get_owned().await.unwrap().len(), 16);
    });
}
