use resilience::retry;

// `upsert_` inserts when the record is missing: it needs a key like
// `create_` does, or `method = "PUT"` when the caller names the record.
#[retry(max = 3)]
async fn upsert_user(name: String) -> Result<String, std::io::Error> {
    Ok(name)
}

fn main() {}
