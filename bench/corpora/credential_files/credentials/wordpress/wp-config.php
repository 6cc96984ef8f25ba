<?php
/**
 * The base configuration for WordPress
 *
 * @package WordPress
 */

// ** Database settings - You can get this info from your web host ** //
/** The name of the database for WordPress */
define( 'DB_NAME', 'wp_prod' );

/** Database username */
define( 'DB_USER', 'wp_admin' );

/** Database password */
define( 'DB_PASSWORD', 'Xq9!vT4#pL2@wZ7' );

/** Database hostname */
define( 'DB_HOST', 'db.internal' );

/** Database charset to use in creating database tables. */
define( 'DB_CHARSET', 'utf8' );

/**#@+
 * Authentication unique keys and salts.
 *
 * Change these to different unique phrases! You can generate these using
 * the {@link https://api.wordpress.org/secret-key/1.1/salt/ WordPress.org secret-key service}.
 */
define( 'AUTH_KEY',         'Zk;8+Q|t]n$1@Fv!xG^<e0W#)4rLc~MuD9h&S{2yP_mJ]bT.oK' );
define( 'SECURE_AUTH_KEY',  'n!4G$u]Zp8~q|Le>0WxYt;7F(cR@3s%vM{k2hD-jU*oB#i6aN' );
define( 'LOGGED_IN_KEY',    'F@7q+]u<Pz.W!3cKx$L9d(r|TmY0~v^s_8n}GhB4e#J2;aSoZ' );
define( 'NONCE_KEY',        'x%Q2^>kM7bT!u$Y0r=Nd{F3|v@wP8~gJ+e;L5s(cH]zA9oK#i' );
define( 'AUTH_SALT',        '3v@L!p]8K~x|uQ0z#R$d;Y7^Tm(F2>nWc+e%s_hB9kG.J{aoZ' );
define( 'SECURE_AUTH_SALT', 'q8]Wv$+3xR!^|Tz0@L<Fk~m;7Y(d#p%N2e_s{cH9u>bJ.gKaoZ' );
define( 'LOGGED_IN_SALT',   'T!7z$q]^0xR|8L@Wv<Fk~m;Y3(d#p%N2e_s{cH9u>bJ.gKaoZ' );
define( 'NONCE_SALT',       'R4z|8$Wq]^!x@0LvT<Fk~m;Y7(d#p%N2e_s{cH9u>bJ.gKaoZ' );

$table_prefix = 'wp_';

define( 'WP_DEBUG', false );

if ( ! defined( 'ABSPATH' ) ) {
	define( 'ABSPATH', __DIR__ . '/' );
}

require_once ABSPATH . 'wp-settings.php';
