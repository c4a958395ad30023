use resilience::retry;

// `save_` may INSERT: a retry after a lost response would store the
// payment twice, so the fn needs a key like `create_` does.
#[retry(max = 3)]
async fn save_payment(cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

fn main() {}
