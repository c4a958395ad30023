use resilience::retry;
use resilience::retry::{Classify, Verdict};

#[derive(Debug)]
struct LocalError;

impl Classify for LocalError {
    fn classify(&self) -> Verdict {
        Verdict::Transient
    }
}

#[retry]
async fn get_user(id: u64) -> Result<u64, LocalError> {
    Ok(id)
}

fn main() {}
