// #[distributed_lock(key = "job:cleanup" , lease = "10m" , at_least = "5m" , on_busy = skip)]
// async fn cleanup () { purge_expired () . await ; }

async fn cleanup() {
    let __lock_acquired = ::distlock::__private::acquire(
            ::core::option::Option::None,
            ::std::format!("job:cleanup"),
            ::distlock::__private::Kind::Plain,
            ::distlock::LockOptions::new()
                .lease(::core::time::Duration::new(600u64, 0u32))
                .hold_at_least(::core::time::Duration::new(300u64, 0u32)),
        )
        .await;
    let __lock_guard = match __lock_acquired {
        ::core::result::Result::Ok(__lock_guard) => __lock_guard,
        ::core::result::Result::Err(__lock_error) => {
            ::distlock::__private::skip(__lock_error, "cleanup");
            return ::core::default::Default::default();
        }
    };
    let __lock_body = async move {
        let __lock_return: () = {
            purge_expired().await;
        };
        #[allow(unreachable_code)] __lock_return
    };
    let __lock_output = ::distlock::LockGuard::scope(&__lock_guard, __lock_body).await;
    ::distlock::__private::release(
            ::distlock::LockGuard::release(__lock_guard),
            "cleanup",
        )
        .await;
    __lock_output
}
