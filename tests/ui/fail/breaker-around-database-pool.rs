use resilience::circuit_breaker;

// Stands in for the `sqlx` crate: the rule reads the error type's path.
mod sqlx {
    #[derive(Debug)]
    pub struct Error;
    pub type Result<T> = std::result::Result<T, Error>;
    pub struct PgPool;
    impl PgPool {
        pub async fn fetch_balance(&self, _id: i64) -> Result<i64> {
            Ok(0)
        }
    }
}

#[circuit_breaker(name = "accounts-db")]
async fn balance(pool: &sqlx::PgPool, id: i64) -> Result<i64, sqlx::Error> {
    pool.fetch_balance(id).await
}

#[circuit_breaker(name = "accounts-db")]
async fn balance_alias(pool: &sqlx::PgPool, id: i64) -> sqlx::Result<i64> {
    pool.fetch_balance(id).await
}

fn main() {}
