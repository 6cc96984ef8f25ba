<?php

return [
    'failed' => '認証に失敗しました。',
    'password' => 'パスワードが正しくありません。',
];
