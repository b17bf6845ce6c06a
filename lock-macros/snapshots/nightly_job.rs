// #[distributed_lock(key = "job:nightly" , on_busy = skip , crate = "locks")]
// async fn nightly () { build_report () . await ; }

async fn nightly() {
    let __lock_acquired = locks::__private::acquire(
            ::core::option::Option::None,
            ::std::format!("job:nightly"),
            locks::__private::Kind::Plain,
            locks::LockOptions::new(),
        )
        .await;
    let __lock_guard = match __lock_acquired {
        ::core::result::Result::Ok(__lock_guard) => __lock_guard,
        ::core::result::Result::Err(__lock_error) => {
            locks::__private::skip(__lock_error, "nightly");
            return ::core::default::Default::default();
        }
    };
    let __lock_body = async move {
        let __lock_return: () = {
            build_report().await;
        };
        #[allow(unreachable_code)] __lock_return
    };
    let __lock_output = locks::LockGuard::scope(&__lock_guard, __lock_body).await;
    locks::__private::release(locks::LockGuard::release(__lock_guard), "nightly").await;
    __lock_output
}
