use resilience::Classify;

#[derive(Debug, Classify)]
enum ApiError {
    #[classify(transient, reason = "timout")]
    Timeout,
    #[classify(permanent, reason = "5xx")]
    NotFound,
    #[classify(source, reason = "network")]
    Io(std::io::Error),
}

fn main() {}
