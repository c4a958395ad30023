use resilience::retry;

// `store_` may create a record: it needs a key like `create_` does.
#[retry(max = 3)]
async fn store_event(payload: String) -> Result<String, std::io::Error> {
    Ok(payload)
}

fn main() {}
