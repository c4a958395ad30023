use resilience::{circuit_breaker, retry};

// Neither `Classify` nor `From<resilience::Error>`: one error for each, at
// the error type, and none for the `.await`s the attributes write.
#[derive(Debug)]
struct PlainError;

#[circuit_breaker(name = "users")]
#[retry]
async fn get_user(id: u64) -> Result<u64, PlainError> {
    tokio::task::yield_now().await;
    Ok(id)
}

fn main() {}
