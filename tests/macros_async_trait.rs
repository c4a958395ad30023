//! The macros on methods of an `#[async_trait]` impl. `#[async_trait]`
//! expands first (it sits on the `impl`); the macros recognise its output
//! and protect the original body, so the order of writing does not matter.

mod macros_common;

use std::sync::Arc;

use async_trait::async_trait;
use macros_common::{ClientError, Script};
use resilience::{circuit_breaker, retry};

#[async_trait]
trait Users: Send + Sync {
    async fn get_user(&self, id: u64) -> Result<u64, ClientError>;
    async fn put_name(&mut self, name: String) -> Result<String, ClientError>;
    async fn get_sum(&self, pair: (u64, u64)) -> Result<u64, ClientError>;
    async fn get_shared(self: Arc<Self>) -> Result<u32, ClientError>;
}

struct Client {
    script: Script,
    renames: u32,
}

#[async_trait]
impl Users for Client {
    #[retry(max = 3)]
    async fn get_user(&self, id: u64) -> Result<u64, ClientError> {
        self.script.send().await?;
        Ok(id)
    }

    #[retry(max = 3)]
    async fn put_name(&mut self, mut name: String) -> Result<String, ClientError> {
        self.renames += 1;
        self.script.send().await?;
        name.push('!');
        Ok(name)
    }

    #[circuit_breaker(name = "async-trait-users", fallback = Self::get_sum_cached)]
    #[retry(max = 2)]
    async fn get_sum(&self, (a, b): (u64, u64)) -> Result<u64, ClientError> {
        self.script.send().await?;
        Ok(a + b)
    }

    #[retry]
    async fn get_shared(self: Arc<Self>) -> Result<u32, ClientError> {
        self.script.send().await?;
        Ok(self.script.calls())
    }
}

impl Client {
    async fn get_sum_cached(&self, _: (u64, u64), _: ClientError) -> Result<u64, ClientError> {
        Ok(0)
    }
}

fn client(statuses: &[u16]) -> Client {
    Client {
        script: Script::new(statuses),
        renames: 0,
    }
}

#[tokio::test(start_paused = true)]
async fn retried_through_a_trait_object() {
    let users: Box<dyn Users> = Box::new(client(&[502, 502]));
    assert_eq!(users.get_user(7).await, Ok(7));
}

#[tokio::test(start_paused = true)]
async fn every_attempt_gets_its_own_copy_of_the_arguments() {
    let mut client = client(&[503]);
    assert_eq!(client.put_name("ada".into()).await.as_deref(), Ok("ada!"));
    assert_eq!((client.renames, client.script.calls()), (2, 2));

    let client = Arc::new(client);
    assert_eq!(client.clone().get_shared().await, Ok(3));
    assert_eq!(Arc::strong_count(&client), 1);
}

#[tokio::test(start_paused = true)]
async fn breaker_retry_and_fallback() {
    let client = client(&[502, 200, 503, 503]);
    assert_eq!(client.get_sum((2, 3)).await, Ok(5));
    assert_eq!(client.get_sum((2, 3)).await, Ok(0), "the fallback answers");
    assert_eq!(client.script.calls(), 4);
}
