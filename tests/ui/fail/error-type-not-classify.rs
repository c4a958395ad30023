use resilience::retry;

#[derive(Debug)]
struct PlainError;

impl From<resilience::Error> for PlainError {
    fn from(_: resilience::Error) -> Self {
        PlainError
    }
}

#[retry]
async fn get_user(id: u64) -> Result<u64, PlainError> {
    Ok(id)
}

fn main() {}
