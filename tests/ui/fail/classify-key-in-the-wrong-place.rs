use resilience::Classify;
use std::time::Duration;

#[derive(Debug, Classify)]
#[classify(transient)]
enum ApiError {
    #[classify(retry_after)]
    Throttled(Duration),
    Busy(#[classify(transient)] u32),
    #[classify(status)]
    Status(u16, String),
    #[classify(runtime)]
    Unit,
}

fn main() {}
