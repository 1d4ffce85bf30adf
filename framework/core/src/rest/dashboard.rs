//! The dashboard: a web page at `/` that shows a running job (its graph with backpressure
//! colours and backups, checkpoint history, failovers, live rates) and steers it (savepoint,
//! stop, rescale, live settings), served by the REST server with the same address and token.
//!
//! The page is three hand-written files (`dashboard/index.html`, `dashboard.css`,
//! `dashboard.js`) embedded in the binary with `include_str!`: no build step, no CDN, no
//! request outside the server. The page reads the REST API like any other client, one request
//! per panel per second; a mutating action sends the token the user typed once (kept in the
//! tab's `sessionStorage`, never in a cookie or on disk), so the API refuses it exactly as it
//! refuses `curl`. The Content-Security-Policy sent with every asset allows nothing but the
//! server itself.
//!
//! ```
//! use weir::rest::{RestConfig, RestServer};
//! let server = RestServer::start(RestConfig::default()).unwrap();
//! println!("open http://{}/ in a browser", server.addr());
//! ```

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};

use super::request::{Answer, State};

/// An embedded asset: its path, media type and text.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// Every file of the page.
const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("dashboard/index.html"),
    },
    Asset {
        path: "/dashboard.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/dashboard.js"),
    },
    Asset {
        path: "/dashboard.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("dashboard/dashboard.css"),
    },
];

/// Nothing but the server itself: no CDN, no inline script, no external request.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Serves the asset at the request's path.
pub(super) async fn asset(_state: State, req: HttpRequest) -> Answer {
    let a = ASSETS
        .iter()
        .find(|a| a.path == req.path())
        .ok_or_else(|| super::request::ApiError::internal(format!("no asset at {}", req.path())))?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, a.content_type))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .body(a.body))
}

#[cfg(test)]
mod tests {
    use super::ASSETS;

    /// The page refers to its own assets only, and every one it refers to is served.
    #[test]
    fn the_page_loads_only_embedded_assets() {
        let html = ASSETS[0].body;
        for a in &ASSETS[1..] {
            assert!(
                html.contains(&format!("\"{}\"", a.path)),
                "{} is linked",
                a.path
            );
        }
        for a in ASSETS {
            // The SVG namespace is a name, not a request.
            let body = a.body.replace("'http://www.w3.org/2000/svg'", "");
            assert!(
                !body.contains("http://") && !body.contains("https://") && !body.contains("//cdn"),
                "no absolute URL in {}",
                a.path
            );
        }
    }
}
