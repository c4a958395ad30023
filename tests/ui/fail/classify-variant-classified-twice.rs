use resilience::Classify;

#[derive(Debug, Classify)]
enum ApiError {
    #[classify(transient, permanent)]
    Timeout,
    #[classify(source)]
    Io(#[classify(source)] std::io::Error),
}

fn main() {}
