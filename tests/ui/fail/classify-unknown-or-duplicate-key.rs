use resilience::Classify;

#[derive(Debug, Classify)]
enum ApiError {
    #[classify(transeint)]
    Timeout,
    #[classify(retryable)]
    Reset,
    #[classify(permanent, permanent)]
    NotFound,
    #[classify]
    Gone,
    #[classify(transient = true)]
    Busy,
}

fn main() {}
