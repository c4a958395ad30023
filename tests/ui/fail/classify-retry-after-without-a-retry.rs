use resilience::Classify;
use std::time::Duration;

#[derive(Debug, Classify)]
enum ApiError {
    #[classify(permanent)]
    Rejected(#[classify(retry_after)] Option<Duration>),
    #[classify(source)]
    Io(std::io::Error, #[classify(retry_after)] Option<Duration>),
    #[classify(transient)]
    Twice(
        #[classify(retry_after)] Option<Duration>,
        #[classify(retry_after)] Option<Duration>,
    ),
}

fn main() {}
